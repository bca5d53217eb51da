"""``python -m stand_in_hub build <dir>`` / ``serve <dir> --port 0``."""

from __future__ import annotations

import argparse
import signal
import sys

from stand_in_hub.build import build
from stand_in_hub.catalog import PAPER_CONFIG
from stand_in_hub.server import HubServer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stand_in_hub", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("build", help="write the repository tree (replaces <dir> whole)")
    make.add_argument("dir")
    make.add_argument("--config", default=str(PAPER_CONFIG), help="pipeline config naming the hub models and datasets")
    make.add_argument("--debs-dir", default=None, help="directory holding r-cran-janeaustenr_*.deb")
    make.add_argument("--only", nargs="+", default=None, metavar="REPO_ID", help="build only these repositories")
    run = commands.add_parser("serve", help="serve a built tree; prints its URL (for HF_ENDPOINT) first")
    run.add_argument("dir")
    run.add_argument("--host", default="127.0.0.1")
    run.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = parser.parse_args(argv)

    if args.command == "build":
        print(build(args.dir, args.config, args.debs_dir, args.only))
        return 0
    server = HubServer(args.dir, args.host, args.port)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # exit through finally: close the socket
    print(server.url, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
