"""The check before a SLURM run submits anything (condensation.runtime.slurm_fit), on sinfo's text."""

from condensation.runtime.slurm_fit import Node, misfits, read_sinfo, request_of

SINFO = """cpu*|c1|32|128000|(null)
gpu|g1|16|256000|gpu:a100:4(S:0-1)
gpu|g2|16|256000|gpu:a100:4(S:0-1)
big|b1|64|1024000+|gpu:h100:8,gpu:a100:2
"""


def test_sinfo_gives_each_partitions_nodes_and_the_default():
    partitions, default = read_sinfo(SINFO)
    assert default == "cpu" and set(partitions) == {"cpu", "gpu", "big"}
    assert partitions["cpu"] == [Node(32, 128000, {})]
    assert partitions["big"] == [Node(64, 1024000, {"h100": 8, "a100": 2})]


def test_requests_read_as_the_executor_plugin_turns_resources_into_sbatch_options():
    one_node = request_of("extract", {"gpu": 2, "gpu_model": "a100", "cpus_per_gpu": 8, "mem_mb": 32000,
                                      "slurm_partition": "gpu"}, threads=1)
    assert (one_node.cpus, one_node.gpus, one_node.gpu_model, one_node.nodes) == (16, 2, "a100", 1)
    nodes = request_of("train_study_run", {"gpu": 0, "gres": "gpu:a100:4", "nodes": 2, "cpus_per_gpu": 4,
                                           "mem_mb": 64000, "slurm_partition": "gpu"}, threads=1)
    assert (nodes.cpus, nodes.gpus, nodes.gpu_model, nodes.nodes) == (16, 4, "a100", 2)
    cpu = request_of("prepare_model", {"mem_mb": 16000, "cpus_per_gpu": 8}, threads=3)
    assert (cpu.cpus, cpu.gpus, cpu.partition) == (3, 0, None)  # cpus_per_gpu means nothing without a GPU
    unknown = request_of("extract", {"gpu": "<TBD>", "mem_mb": 1000}, threads=1)  # set once the model is fetched
    assert unknown.gpus == 1


def test_each_rule_that_no_node_can_hold_is_named_with_the_largest_node():
    partitions, default = read_sinfo(SINFO)
    fits = [
        request_of("extract", {"gpu": 4, "gpu_model": "a100", "cpus_per_gpu": 4, "mem_mb": 256000,
                               "slurm_partition": "gpu"}, 1),
        request_of("train_study_run", {"gres": "gpu:a100:4", "nodes": 2, "mem_mb": 1000, "slurm_partition": "gpu"}, 1),
        request_of("prepare_model", {"mem_mb": 128000}, 32),  # the default partition
    ]
    assert misfits(fits, partitions, default) == []
    too_big = [
        request_of("extract", {"gpu": 1, "gpu_model": "a100", "cpus_per_gpu": 32, "mem_mb": 1000,
                               "slurm_partition": "gpu"}, 1),
        request_of("extract", {"gpu": 5, "gpu_model": "a100", "mem_mb": 1000, "slurm_partition": "gpu"}, 1),
        request_of("train_study_run", {"gres": "gpu:a100:4", "nodes": 3, "mem_mb": 1000, "slurm_partition": "gpu"}, 1),
        request_of("evaluate_checkpoint", {"gpu": 1, "gpu_model": "h100", "mem_mb": 1000, "slurm_partition": "gpu"}, 1),
        request_of("pack_study_data", {"mem_mb": 200000}, 1),
        request_of("pretrain", {"gpu": 1, "mem_mb": 1000, "slurm_partition": "gpus"}, 1),
    ]
    assert misfits(too_big, partitions, default) == [
        "extract: asks 32 CPUs, 1000 MB, 1 GPU a100 of partition gpu, whose largest node holds 16 CPUs, "
        "256000 MB, 4 GPU a100",  # once a rule, its first request
        "train_study_run: asks 1 CPU, 1000 MB, 4 GPU a100 per node, on 3 nodes of partition gpu, whose largest "
        "node holds 16 CPUs, 256000 MB, 4 GPU a100",
        "evaluate_checkpoint: asks 1 CPU, 1000 MB, 1 GPU h100 of partition gpu, whose largest node holds 16 CPUs, "
        "256000 MB, 4 GPU a100",
        "pack_study_data: asks 1 CPU, 200000 MB of partition cpu, whose largest node holds 32 CPUs, 128000 MB, "
        "no GPU",
        "pretrain: partition 'gpus' does not exist (partitions: big, cpu, gpu)",
    ]
