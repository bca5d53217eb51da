"""A real SLURM on this machine for the cluster tests: munged, slurmctld and two slurmd daemons
(nodes ``cond-node1`` and ``cond-node2``, one counted GPU each), their files in a directory of
their own, every Slurm command pointed at them through ``SLURM_CONF``.

The packages and the host names come from ``tools/install_slurm.sh`` (Debian, as root);
:func:`missing` says what is absent, for a test to skip with. The GPUs are character devices with
the numbers of /dev/null: SLURM counts and hands them out (``CUDA_VISIBLE_DEVICES``), PyTorch
finds no driver and runs on the CPU. Facts: ``../shared/reference/slurm_local.md``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock

NODES = ("cond-node1", "cond-node2")
MACHINE_LOCK = Path(tempfile.gettempdir()) / "condensation-real-slurm.lock"
"""Held while a test cluster runs: one at a time a machine (the default slurm.conf link is the machine's)."""
NODE_CPUS = 2  # both nodes share this machine's cores: SLURM does not know
NODE_MEMORY_MB = 6000
KILL_WAIT = 10
"""Seconds between the SIGTERM that ends a job step and the SIGKILL for what is left in it."""
DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol")


DEFAULT_CONF = Path("/etc/slurm/slurm.conf")
"""Where Slurm commands look when ``SLURM_CONF`` is unset: the jobstep executor plugin (0.6.1)
unsets it for the ``srun`` it starts in each job, so the cluster's files are linked here too."""


def missing() -> str | None:
    """Why no real SLURM can start here, or None."""
    if DEFAULT_CONF.exists() and not DEFAULT_CONF.is_symlink():
        return f"this machine has a SLURM of its own ({DEFAULT_CONF}): the tests leave it alone"
    absent = [name for name in DAEMONS if shutil.which(name) is None and not Path("/usr/sbin", name).exists()]
    if absent:
        return (f"no SLURM here ({', '.join(absent)} not found): `sudo bash tools/install_slurm.sh` installs one "
                "(Debian)")
    if os.geteuid() != 0:
        return "the real SLURM runs its daemons as root (SlurmUser=root); these tests need root"
    for node in NODES:
        try:
            socket.gethostbyname(node)
        except OSError:
            return f"host name {node} does not resolve: `sudo bash tools/install_slurm.sh` adds it to /etc/hosts"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _daemon(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


@dataclass
class SlurmCluster:
    """Two nodes of ``NODE_CPUS`` CPUs, ``NODE_MEMORY_MB`` MB and one a100 GPU each, in
    partitions ``cpu`` (the default) and ``gpu``. ``env`` runs Slurm commands against it."""

    root: Path
    offline_nodes: bool = False
    """Every task sees a Hugging Face address nothing answers, as on compute nodes without a network."""
    processes: list[subprocess.Popen] = field(default_factory=list)
    _lock: FileLock = field(default_factory=lambda: FileLock(MACHINE_LOCK))

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def write_files(self) -> None:
        for folder in ("state", "log", "run", *(f"spool/{node}" for node in NODES)):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        munge = self.root / "munge"
        munge.mkdir(mode=0o711, exist_ok=True)  # the socket must be reachable; the key is 0600
        subprocess.run([_daemon("mungekey"), "--create", "--force", "--keyfile", str(munge / "munge.key")],
                       check=True, capture_output=True)
        hostname = socket.gethostname()
        ports = [_free_port() for _ in range(1 + len(NODES))]
        nodes, gres = [], []
        for index, node in enumerate(NODES):
            device = self.root / f"gpu{index}"
            if not device.exists():
                os.mknod(device, 0o666 | 0o020000, os.makedev(1, 3))  # a character device, like /dev/null
            nodes.append(f"NodeName={node} NodeHostname={hostname} NodeAddr=127.0.0.1 Port={ports[1 + index]} "
                         f"CPUs={NODE_CPUS} RealMemory={NODE_MEMORY_MB} Gres=gpu:a100:1 State=UNKNOWN")
            gres.append(f"NodeName={node} Name=gpu Type=a100 File={device}")
        root = self.root
        prolog = []
        if self.offline_nodes:  # a TaskProlog's "export" lines set the task's environment
            script = root / "task_prolog.sh"
            script.write_text("#!/bin/sh\necho export HF_ENDPOINT=http://127.0.0.1:9\n")  # the discard port
            script.chmod(0o755)
            prolog = [f"TaskProlog={script}"]
        self.conf.write_text("\n".join([
            "ClusterName=condensation-tests",
            f"SlurmctldHost={hostname}(127.0.0.1)",
            f"SlurmctldPort={ports[0]}",
            "SlurmUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={munge / 'socket'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "GresTypes=gpu",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "MinJobAge=600",  # finished jobs stay in squeue/scontrol: the plugin's squeue status needs it
            f"KillWait={KILL_WAIT}",
            "ReturnToService=2",
            "SchedulerParameters=sched_interval=1",
            "MessageTimeout=20",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool/%n'}",
            f"SlurmctldLogFile={root / 'log/slurmctld.log'}",
            f"SlurmdLogFile={root / 'log/slurmd-%n.log'}",
            f"SlurmctldPidFile={root / 'run/slurmctld.pid'}",
            f"SlurmdPidFile={root / 'run/slurmd-%n.pid'}",
            *prolog,
            *nodes,
            f"PartitionName=cpu Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP",
            f"PartitionName=gpu Nodes={','.join(NODES)} MaxTime=INFINITE State=UP",
            "",
        ]))
        (self.root / "gres.conf").write_text("\n".join(gres) + "\n")

    def start(self, timeout: float = 60) -> SlurmCluster:
        self._lock.acquire(timeout=3600)  # another test session's cluster holds the machine's slurm.conf link
        self.write_files()
        DEFAULT_CONF.parent.mkdir(exist_ok=True)
        for name in ("slurm.conf", "gres.conf"):
            linked = DEFAULT_CONF.with_name(name)
            linked.unlink(missing_ok=True)  # a link left by a test session that was killed
            linked.symlink_to(self.root / name)
        munge = self.root / "munge"
        log = open(self.root / "log/daemons.out", "ab")
        self.processes.append(subprocess.Popen(
            [_daemon("munged"), "--foreground", "--force", "--socket", str(munge / "socket"),
             "--key-file", str(munge / "munge.key"), "--pid-file", str(munge / "pid"),
             "--seed-file", str(munge / "seed"), "--log-file", str(munge / "log")],
            stdout=log, stderr=log))
        self._wait(lambda: (munge / "socket").exists(), timeout, "munged")
        self.processes.append(subprocess.Popen([_daemon("slurmctld"), "-D", "-i"], env=self.env,
                                               stdout=log, stderr=log))
        for node in NODES:
            self.processes.append(subprocess.Popen([_daemon("slurmd"), "-D", "-N", node], env=self.env,
                                                   stdout=log, stderr=log))
        self._wait(lambda: self.node_states() == {node: "idle" for node in NODES}, timeout, "two idle nodes")
        return self

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline or any(process.poll() is not None for process in self.processes):
                raise RuntimeError(f"the test SLURM did not start ({what}); logs in {self.root / 'log'}:\n"
                                   + self.logs())
            time.sleep(0.5)

    def node_states(self) -> dict[str, str]:
        listed = subprocess.run(["sinfo", "-N", "-h", "-p", "cpu", "-o", "%N %t"], env=self.env,
                                capture_output=True, text=True)
        return dict(line.split() for line in listed.stdout.splitlines() if len(line.split()) == 2)

    def logs(self) -> str:
        return "\n".join(f"== {path.name}\n{path.read_text()[-3000:]}"
                         for path in sorted((self.root / "log").glob("*")))

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        self.processes.clear()
        for name in ("slurm.conf", "gres.conf"):
            linked = DEFAULT_CONF.with_name(name)
            if linked.is_symlink() and linked.resolve() == (self.root / name).resolve():
                linked.unlink()
        self._lock.release()

    def return_to_service(self, node: str) -> None:
        """A node set DOWN back in service (ReturnToService=2 may have done it already)."""
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], env=self.env, capture_output=True)

    def scontrol(self, *args: str) -> str:
        return subprocess.run(["scontrol", *args], env=self.env, capture_output=True, text=True, check=True).stdout

    def jobs(self) -> list[dict[str, str]]:
        """Every job SLURM still holds (``MinJobAge`` keeps finished ones ten minutes), each as
        ``scontrol show job``'s fields."""
        text = self.scontrol("show", "job", "--oneliner", "--details")
        return [dict(field.split("=", 1) for field in line.split() if "=" in field)
                for line in text.splitlines() if line.startswith("JobId=")]
