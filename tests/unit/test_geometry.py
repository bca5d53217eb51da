"""Cosine geometry against known answers, and batched extraction against one-at-a-time."""

import copy
import math

import numpy as np
import pytest
import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from condensation import cosine
from condensation.config.specs import TrendConfig
from condensation.cosine_extraction import (
    CHUNK_VALUES,
    DEVICE_CHUNK_VALUES,
    CosineAccumulator,
    closed_counts,
    cosine_matrices,
    density_histogram,
    edge_counts,
    extract_cosine_statistics,
    histogram_counts,
    position_blocks,
)
from condensation.geometry import NUM_BINS, CosineStatistics
from condensation.lens_extraction import LensAccumulator
from condensation.runtime.io import CorruptArtifactError, write_manifest
from condensation.trend import bootstrap_mean_interval, depth_trend, trend_statistics
from tests.helpers.float_bounds import U32, histogram_tolerance, mean_cosine_bound


def orthonormal(num_tokens: int, dim: int, seed: int = 0) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(dim, dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))
    return q[:num_tokens].float()


def float64_cosines(hidden: torch.Tensor) -> np.ndarray:
    """``[N, T, d]`` -> the ``[N, T, T]`` cosines, computed in float64."""
    z = hidden.double().numpy()
    z = z / np.linalg.norm(z, axis=-1, keepdims=True)
    return np.clip(z @ z.transpose(0, 2, 1), -1, 1)


def assert_same_histogram(found: np.ndarray, expected: np.ndarray, values: np.ndarray, bound: float) -> None:
    """Densities equal but for the values (cosines, in float64) within ``bound`` of a bin edge,
    which a computation within ``bound`` of them may put on either side (and float64 rounding)."""
    np.testing.assert_array_less(np.abs(found - expected), histogram_tolerance(values, bound) + 1e-9)


def accumulate(*layers: torch.Tensor) -> CosineStatistics:
    accumulator = CosineAccumulator()
    accumulator.update([layer.unsqueeze(0) for layer in layers])
    return accumulator.finalize()


def test_orthonormal_tokens_have_zero_cosine_off_the_diagonal():
    stats = accumulate(orthonormal(6, 16) * 3.0)  # scale must not matter
    bound = mean_cosine_bound(16, 36, roundings=1)  # float32 cosines of orthonormal rows rounded to float32
    np.testing.assert_allclose(stats.mean_cosine[0], np.eye(6), rtol=0, atol=bound + U32)  # stored in float32
    assert stats.layer_mean_offdiag[0] == pytest.approx(0.0, abs=bound)
    assert stats.layer_mean[0] == pytest.approx(1 / 6, abs=bound)  # the diagonal's 6 ones over 36 pairs


def test_identical_tokens_have_cosine_one():
    vector = torch.randn(1, 24)
    stats = accumulate(vector.repeat(5, 1))
    bound = mean_cosine_bound(24, 25)  # float32 cosines of float32 rows
    assert stats.layer_mean[0] == pytest.approx(1.0, abs=bound)
    assert stats.layer_mean_offdiag[0] == pytest.approx(1.0, abs=bound)
    # every value sits in the top bin
    assert stats.hist_of_mean[0][-1] * (2 / NUM_BINS) == pytest.approx(1.0)


def test_opposite_tokens_have_cosine_minus_one():
    vector = torch.randn(1, 8)
    stats = accumulate(torch.cat([vector, -vector]))
    bound = mean_cosine_bound(8, 4)  # float32 cosines of float32 rows
    assert stats.mean_cosine[0][0, 1] == pytest.approx(-1.0, abs=bound + U32)  # stored in float32
    assert stats.layer_mean[0] == pytest.approx(0.0, abs=bound)


def test_zero_vector_gives_zero_cosine_not_nan():
    hidden = torch.zeros(1, 3, 4)
    hidden[0, 0] = 1.0
    cos = cosine_matrices(hidden)
    assert torch.isfinite(cos).all()
    assert cos[0, 1, 0] == 0.0


# the default (by device), every sequence at once (the CPU's and a GPU's budgets), one row, a few rows
@pytest.mark.parametrize("chunk_values", [None, CHUNK_VALUES, DEVICE_CHUNK_VALUES, 1, 20])
def test_accumulator_matches_a_direct_numpy_computation(chunk_values):
    """The cosines of a batch come in chunks of rows (memory linear in T): any chunking gives the
    same statistics."""
    generator = torch.Generator().manual_seed(1)
    batches = [[torch.randn(b, 7, 5, generator=generator) for _layer in range(3)] for b in (2, 3)]
    accumulator = CosineAccumulator(chunk_values=chunk_values)
    for batch in batches:
        accumulator.update(batch)
    stats = accumulator.finalize()

    # float32 cosines against float64 ones of the same float32 rows; in the histograms, only a value
    # that near a bin edge may change bins
    bound = mean_cosine_bound(5, 5 * 7 * 7)
    for layer in range(3):
        z = np.concatenate([batch[layer].numpy() for batch in batches]).astype(np.float64)
        z /= np.linalg.norm(z, axis=-1, keepdims=True)
        matrices = np.clip(z @ z.transpose(0, 2, 1), -1, 1)  # [5, 7, 7]
        mean = matrices.mean(axis=0)
        np.testing.assert_allclose(stats.mean_cosine[layer], mean, rtol=0, atol=bound + U32)  # stored in float32
        assert stats.layer_mean[layer] == pytest.approx(mean.mean(), abs=bound)
        off = ~np.eye(7, dtype=bool)
        assert stats.layer_mean_offdiag[layer] == pytest.approx(mean[off].mean(), abs=bound)
        expected_pooled, _ = np.histogram(matrices, bins=NUM_BINS, range=(-1, 1), density=True)
        assert_same_histogram(stats.hist_pooled[layer], expected_pooled, matrices, bound)
        expected_mean_hist, _ = np.histogram(mean, bins=NUM_BINS, range=(-1, 1), density=True)
        assert_same_histogram(stats.hist_of_mean[layer], expected_mean_hist, mean, bound)
        # each sequence's own means, in the order the sequences came
        np.testing.assert_allclose(stats.sequence_layer_mean[:, layer], matrices.mean(axis=(1, 2)), rtol=0,
                                   atol=bound)
        np.testing.assert_allclose(stats.sequence_layer_mean_offdiag[:, layer], matrices[:, off].mean(axis=1),
                                   rtol=0, atol=bound)
    assert stats.num_sequences == 5
    assert stats.sequence_layer_mean.shape == stats.sequence_layer_mean_offdiag.shape == (5, 3)


def test_above_the_heatmap_size_the_mean_matrix_is_block_averaged():
    """T = 37 kept at 5 x 5: each cell is the mean of the full mean matrix over its block of
    position pairs, the histogram is that of the T x T matrix with each entry replaced by its
    cell's mean, and every other statistic equals the full-resolution one."""
    generator = torch.Generator().manual_seed(3)
    batches = [[torch.randn(b, 37, 6, generator=generator) + 0.3 * layer for layer in range(3)] for b in (4, 2)]
    full, blocked = CosineAccumulator(), CosineAccumulator(heatmap_size=5, chunk_values=100)
    for batch in batches:
        full.update(batch)
        blocked.update(batch)
    whole, averaged = full.finalize(), blocked.finalize()
    blocks = position_blocks(37, 5).numpy()
    assert np.bincount(blocks).tolist() == [8, 7, 8, 7, 7]  # near-equal runs of consecutive positions
    one_hot = np.eye(5)[blocks]  # [T, 5]
    sizes = one_hot.sum(0)
    # Chunks of rows round their float32 cosines apart from the whole batch's: each accumulator is
    # within a mean's bound of the exact values (mean_cosine, stored in float32, one rounding more)
    bound = mean_cosine_bound(6, 6 * 37 * 37)
    for layer in range(3):
        mean = whole.mean_cosine[layer].astype(np.float64)
        expected = one_hot.T @ mean @ one_hot / np.outer(sizes, sizes)
        np.testing.assert_allclose(averaged.mean_cosine[layer], expected, rtol=0, atol=2 * (bound + U32))
        expanded = expected[blocks][:, blocks]  # [T, T], each entry its cell's mean
        histogram, _ = np.histogram(expanded, bins=NUM_BINS, range=(-1, 1), density=True)
        assert_same_histogram(averaged.hist_of_mean[layer], histogram, expanded, 2 * (bound + U32))
        pooled = float64_cosines(torch.cat([batch[layer] for batch in batches]))
        assert_same_histogram(averaged.hist_pooled[layer], whole.hist_pooled[layer], pooled, bound)
    for name in ("layer_mean", "layer_mean_offdiag", "sequence_layer_mean", "sequence_layer_mean_offdiag"):
        np.testing.assert_allclose(getattr(averaged, name), getattr(whole, name), rtol=0, atol=2 * bound,
                                   err_msg=name)
    assert averaged.mean_cosine.shape == (3, 5, 5) and averaged.seq_len == 37 and averaged.meta["heatmap_cells"] == 5
    assert whole.positions is None and whole.seq_len == 37


def test_a_block_averaged_file_keeps_its_length(tmp_path):
    accumulator = CosineAccumulator(heatmap_size=4)
    accumulator.update([torch.randn(2, 9, 3) for _layer in range(2)])
    stats = accumulator.finalize()
    stats.save(tmp_path / "long.npz")
    loaded = CosineStatistics.load(tmp_path / "long.npz")
    assert loaded.seq_len == 9 and loaded.mean_cosine.shape == (2, 4, 4)
    with pytest.raises(ValueError, match="positive number of cells"):
        CosineAccumulator(heatmap_size=0)


def authors_layer_means(model, input_ids: torch.Tensor) -> np.ndarray:
    """The authors' computation (compute_embedding_cossim.py, as the reference digest gives it):
    per sequence and layer, rows normalised in numpy, ``z @ z.T``, averaged over sequences,
    then ``M.mean(axis=(1, 2))``: every T^2 pair, diagonal included, layer 0 counted."""
    sums = None
    with torch.no_grad():
        for sequence in input_ids:
            hidden = model(input_ids=sequence[None], output_hidden_states=True).hidden_states
            matrices = []
            for layer in hidden:
                z = layer[0].double().numpy()
                z = z / np.linalg.norm(z, axis=1, keepdims=True)
                matrices.append(z @ z.T)
            sums = np.stack(matrices) if sums is None else sums + np.stack(matrices)
    return (sums / len(input_ids)).mean(axis=(1, 2))


@pytest.mark.parametrize("seq_len, heatmap_size", [(256, None), (300, 64)])
def test_layer_means_equal_the_authors_computation(seq_len, heatmap_size):
    """To float32 rounding at the workflow's length, and at a length whose mean matrix is block-averaged."""
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    model = GPT2Model(GPT2Config(n_layer=3, n_embd=32, n_head=4, n_inner=64, n_positions=512, vocab_size=50)).eval()
    model.double()  # float64 forwards: batches of 2 here and of 1 there give the same states to ~1e-16
    input_ids = torch.randint(0, 50, (5, seq_len), generator=torch.Generator().manual_seed(1))
    stats = extract_cosine_statistics(model, input_ids, batch_size=2, lens_tokens=None, heatmap_size=heatmap_size)
    # our float32 cosines of the states cast to float32 (one rounding; one more covers the float64
    # forwards' difference) against the authors' float64 ones; leaving out the diagonal would move
    # a layer mean by ~(1 - mean) / T, over 1e-3
    bound = mean_cosine_bound(32, 5 * seq_len**2, roundings=2)
    np.testing.assert_allclose(stats.layer_mean, authors_layer_means(model, input_ids), rtol=0, atol=bound)
    assert stats.seq_len == seq_len


def test_per_sequence_means_average_to_the_layer_means():
    generator = torch.Generator().manual_seed(2)
    accumulator = CosineAccumulator()
    for batch in (4, 1, 7):  # uneven batches
        accumulator.update([torch.randn(batch, 33, 8, generator=generator) + 0.4 * layer for layer in range(4)])
    stats = accumulator.finalize()
    assert stats.sequence_layer_mean.shape == (12, 4)
    np.testing.assert_allclose(stats.sequence_layer_mean.mean(axis=0), stats.layer_mean, rtol=0, atol=1e-14)
    np.testing.assert_allclose(stats.sequence_layer_mean_offdiag.mean(axis=0), stats.layer_mean_offdiag, rtol=0,
                               atol=1e-14)
    assert not np.allclose(stats.sequence_layer_mean, stats.layer_mean)  # sequences do differ


def test_density_histogram_integrates_to_one():
    values = torch.rand(1000) * 2 - 1
    assert density_histogram(values).sum() * (2 / NUM_BINS) == pytest.approx(1.0)


def previous_counts(values: np.ndarray, bins: int) -> np.ndarray:
    """The counts as the extraction made them before its histograms took float32 positions: the
    index ``floor((x + 1) * bins / 2)`` in float64, clamped to the outer bins."""
    index = np.floor((values.astype(np.float64) + 1.0) * (bins / 2)).clip(0, bins - 1).astype(int)
    return np.bincount(index, minlength=bins)


def values_at_every_edge(bins: int, dtype: torch.dtype) -> torch.Tensor:
    """Each bin edge over [-1, 1] and its neighbours one ulp below and above, in ``dtype``."""
    edges = torch.linspace(-1.0, 1.0, bins + 1, dtype=torch.float64).to(dtype)
    return torch.cat([torch.nextafter(edges, edges - 1), edges, torch.nextafter(edges, edges + 1)]).clamp(-1, 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_histogram_counts_are_numpys_edges_included(dtype):
    """Positions computed in the values' own dtype (``x * bins / 2`` and its floor are exact for
    ``bins`` a power of two), counted by ``histc``: the counts equal numpy's and the previous
    float64 index arithmetic's, value for value, at every edge and one ulp either side of it; with
    weights, numpy's weighted counts; and several layers counted in one call each get their own
    (the value 1.0 of one layer does not spill into the next's first bin)."""
    generator = torch.Generator().manual_seed(0)
    crowded = torch.cat([0.05 + 0.01 * torch.randn(5000, generator=generator),
                         torch.rand(3000, generator=generator) * 2 - 1]).to(dtype)
    values = torch.cat([crowded, values_at_every_edge(NUM_BINS, dtype)])
    counts = histogram_counts(values)
    np.testing.assert_array_equal(counts.numpy(), np.histogram(values.double().numpy(), NUM_BINS, (-1, 1))[0])
    # the previous counts too, wherever its float64 sum x + 1 was exact: every float32 value but those
    # nearer 0 than ~2^-53 (1 - 2^-60 rounds to 1: it put the negative ones in the bin above 0), and
    # float64 values (the mean matrix's) but the ulp-neighbours of an edge
    exact = values.double() + 1.0 - 1.0 == values.double()
    np.testing.assert_array_equal(histogram_counts(values[exact]).numpy(), previous_counts(values[exact].numpy(),
                                                                                           NUM_BINS))
    weights = torch.rand(values.shape, generator=generator, dtype=torch.float64)
    np.testing.assert_allclose(histogram_counts(values, weights=weights).numpy(),
                               np.histogram(values.double().numpy(), NUM_BINS, (-1, 1), weights=weights.numpy())[0],
                               rtol=1e-12)
    layers = torch.stack([values, values.flip(0).clamp(max=0.3), torch.ones_like(values)])
    per_layer = closed_counts(edge_counts(layers))
    for counts_of_layer, values_of_layer in zip(per_layer, layers):
        np.testing.assert_array_equal(counts_of_layer.numpy(), histogram_counts(values_of_layer).numpy())


def test_histogram_counts_of_other_bins_and_beyond_the_range():
    """A number of bins that is not a power of two takes the previous float64 arithmetic, with the
    same counts; values beyond [-1, 1] count in the outer bins, as before."""
    values = torch.cat([torch.rand(2000, generator=torch.Generator().manual_seed(1)) * 2.4 - 1.2,
                        values_at_every_edge(100, torch.float32)])
    values = values[values.double() + 1.0 - 1.0 == values.double()]  # as above
    np.testing.assert_array_equal(histogram_counts(values, bins=100).numpy(), previous_counts(values.numpy(), 100))
    np.testing.assert_array_equal(histogram_counts(values).numpy(), previous_counts(values.numpy(), NUM_BINS))


def test_sequences_of_different_length_are_rejected():
    accumulator = CosineAccumulator()
    accumulator.update([torch.randn(1, 4, 3)])
    with pytest.raises(ValueError, match="same length"):
        accumulator.update([torch.randn(1, 5, 3)])
    with pytest.raises(ValueError, match="2 layers but earlier batches had 1"):
        accumulator.update([torch.randn(1, 4, 3)] * 2)


def test_finalize_without_data_is_an_error():
    with pytest.raises(ValueError, match="no sequences"):
        CosineAccumulator().finalize()


@pytest.fixture(scope="module")
def tiny_model():
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    return GPT2Model(GPT2Config(n_layer=3, n_embd=32, n_head=4, n_inner=64, n_positions=32, vocab_size=50)).eval()


def test_batched_extraction_equals_one_sequence_at_a_time(tiny_model):
    model = copy.deepcopy(tiny_model).double()  # float64 forwards: the batch moves the states by ~1e-16 only
    input_ids = torch.randint(0, 50, (5, 16), generator=torch.Generator().manual_seed(0))
    one_at_a_time = extract_cosine_statistics(model, input_ids, batch_size=1)
    # each side's float32 cosines of the states cast to float32 (one rounding, one more for the
    # float64 forwards' difference) are within a mean's bound of the exact ones (mean_cosine,
    # stored in float32, one rounding more)
    bound = mean_cosine_bound(32, 5 * 16 * 16, roundings=2)
    with torch.no_grad():
        pooled = [float64_cosines(states) for states in model(input_ids, output_hidden_states=True).hidden_states]
    for batch_size in (2, 5):
        batched = extract_cosine_statistics(model, input_ids, batch_size=batch_size)
        assert batched.num_layers == 4  # embedding output + 3 blocks
        np.testing.assert_allclose(batched.mean_cosine, one_at_a_time.mean_cosine, rtol=0, atol=2 * (bound + U32))
        np.testing.assert_allclose(batched.layer_mean, one_at_a_time.layer_mean, rtol=0, atol=2 * bound)
        for layer, values in enumerate(pooled):
            assert_same_histogram(batched.hist_pooled[layer], one_at_a_time.hist_pooled[layer], values, bound)


def test_extraction_rejects_malformed_input(tiny_model):
    with pytest.raises(ValueError, match=r"\[N, T\]"):
        extract_cosine_statistics(tiny_model, torch.zeros(0, 4, dtype=torch.long))


def test_statistics_round_trip_through_npz(tmp_path, tiny_model):
    input_ids = torch.randint(0, 50, (2, 8))
    stats = extract_cosine_statistics(tiny_model, input_ids, meta={"model": "tiny"})
    path = tmp_path / "out" / "tiny.npz"
    stats.save(path)
    loaded = CosineStatistics.load(path)
    assert loaded.meta == {"model": "tiny"}
    assert np.array_equal(loaded.layer_mean, stats.layer_mean)
    assert np.array_equal(loaded.mean_cosine, stats.mean_cosine)
    assert np.array_equal(loaded.sequence_layer_mean, stats.sequence_layer_mean)
    assert np.array_equal(loaded.sequence_layer_mean_offdiag, stats.sequence_layer_mean_offdiag)
    assert loaded.seq_len == 8 and loaded.num_sequences == 2
    # no temporary left behind; the manifest records the checksum
    assert sorted(p.name for p in path.parent.iterdir()) == ["tiny.npz", "tiny.npz.manifest.json"]


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_damaged_statistics_file_is_detected(tmp_path, tiny_model, damage):
    stats = extract_cosine_statistics(tiny_model, torch.randint(0, 50, (2, 8)))
    path = tmp_path / "tiny.npz"
    stats.save(path)
    raw = bytearray(path.read_bytes())
    if damage == "truncate":
        raw = raw[: len(raw) // 2]  # as a copy interrupted half-way leaves it
    else:
        raw[len(raw) // 2] ^= 0xFF  # one flipped byte
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptArtifactError, match="tiny.npz: checksum .* does not match its manifest"):
        CosineStatistics.load(path)


def test_stacks_of_any_size_give_the_same_statistics(tiny_model, monkeypatch):
    """A batch's layers are normalised and reduced a stack at a time (``cosine.CPU_STACK_VALUES``
    here, ``STACK_VALUES`` on a GPU): one layer per stack, as a model too large for one stack gets,
    gives what one stack of every layer gives (each cosine matrix, each unit row, each sum computed
    alike)."""
    input_ids = torch.randint(0, 50, (6, 16), generator=torch.Generator().manual_seed(4))
    whole = extract_cosine_statistics(tiny_model, input_ids, batch_size=4, lens_tokens=60)
    monkeypatch.setattr(cosine, "CPU_STACK_VALUES", 1)
    one_by_one = extract_cosine_statistics(tiny_model, input_ids, batch_size=4, lens_tokens=60)
    for name in ("mean_cosine", "hist_of_mean", "hist_pooled", "layer_mean", "layer_mean_offdiag",
                 "sequence_layer_mean", "sequence_layer_mean_offdiag"):
        np.testing.assert_allclose(getattr(one_by_one, name), getattr(whole, name), rtol=1e-12, atol=0, err_msg=name)
    np.testing.assert_allclose(one_by_one.lenses.values, whole.lenses.values, rtol=1e-9)
    np.testing.assert_allclose(one_by_one.lenses.jackknife, whole.lenses.jackknife, rtol=1e-9, equal_nan=True)


class DispatchedOperations(TorchDispatchMode):
    """Counts the aten operations dispatched inside it: on a GPU each is at least one kernel launch.
    Views are left out (they launch nothing: their output shares an input's storage); a cast is
    counted (under ``inference_mode`` it reaches the mode as ``aten.to``, an alias by its schema,
    but it copies)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = pytree.tree_leaves((args, kwargs))
        if not (func.is_view and storages(out) <= storages(inputs)):
            self.count += 1
        return out


def storages(values) -> set[int]:
    return {leaf.untyped_storage().data_ptr() for leaf in pytree.tree_leaves(values) if isinstance(leaf, torch.Tensor)}


def operations_per_batch(layers: int) -> tuple[int, int]:
    """(the bare forward pass, the cosines' and lenses' reductions as ``extract_cosine_statistics``
    runs them) in operations dispatched for one batch of a GPT2-shaped model with ``layers``
    blocks: the second batch, since the first also allocates the running sums. Its 13 hidden
    states fit one stack on a CPU too (``cosine.CPU_STACK_VALUES``), as GPT2-small's do on a GPU."""
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    model = GPT2Model(GPT2Config(n_layer=layers, n_embd=32, n_head=4, n_inner=64, n_positions=16,
                                 vocab_size=50)).eval()
    input_ids = torch.randint(0, 50, (8, 16), generator=torch.Generator().manual_seed(0))
    accumulators = [CosineAccumulator(), LensAccumulator(*input_ids.shape)]
    with torch.inference_mode():
        for batch in input_ids.split(4):
            with DispatchedOperations() as forward:
                hidden_states = model(input_ids=batch, output_hidden_states=True, use_cache=False).hidden_states
            with DispatchedOperations() as reductions:
                cosine.accumulate(accumulators, hidden_states)
    return forward.count, reductions.count


def test_a_batch_costs_a_few_operations_beyond_its_forward_pass():
    """The per-batch target on a GPU is 1.1x a bare forward pass, and the first GPU check found
    the forward itself launch-bound (GPT2-small, 16 x 256 tokens: ~16 us per operation), so what a
    batch adds is counted in operations. A GPT2 block dispatches ~20; the reductions of a batch,
    cosines and lenses together, may dispatch at most as many as three of them, ``3 x forward /
    (L + 1)`` (55 at GPT2-small's 12 blocks, against 50 now, 16 of them the layer angles and the
    norms' lenses; room for a cast to float32 on a GPU), and no more at 12 blocks than at 2: they run once per
    stack of layers (the unit rows shared, the cosines of every layer in one product, their
    histograms in one count), not once per layer. Before they did (3fd73fa: 423 for the cosines and
    232 for the lenses, 655 beside the forward's 242). The bound leaves the time target to a GPU,
    since an operation here may take longer than one of the forward's."""
    forward, reductions = operations_per_batch(12)
    bound = 3 * forward // 13
    assert reductions <= bound, f"{reductions} operations per batch beside the forward pass's {forward} (bound {bound})"
    assert operations_per_batch(2)[1] == reductions, "the reductions of a batch grow with the depth"


def test_trend_of_a_monotone_sequence_is_plus_or_minus_one():
    rising = trend_statistics([0.1, 0.2, 0.25, 0.5, 0.9])
    assert rising.spearman_rho == pytest.approx(1.0)
    assert rising.kendall_tau == pytest.approx(1.0)
    falling = trend_statistics([0.9, 0.5, 0.3, 0.1])
    assert falling.spearman_rho == pytest.approx(-1.0)
    assert falling.kendall_tau == pytest.approx(-1.0)


def test_trend_of_a_known_permutation():
    # ranks 1,3,2,4: d^2 = 0+1+1+0 = 2, rho = 1 - 6*2/(4*15) = 0.8; tau = (5-1)/6
    stats = trend_statistics([0.1, 0.3, 0.2, 0.4])
    assert stats.spearman_rho == pytest.approx(0.8)
    assert stats.kendall_tau == pytest.approx(4 / 6)


def test_last_n_means():
    stats = trend_statistics([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert stats.last_n["last_1"] == 6.0
    assert stats.last_n["last_3"] == 5.0
    assert stats.last_n["last_half"] == pytest.approx(np.mean([3, 4, 5, 6]))  # ceil(7/2) = 4 layers


def test_constant_sequence_has_undefined_trend():
    stats = trend_statistics([0.5, 0.5, 0.5])
    assert math.isnan(stats.spearman_rho) and math.isnan(stats.kendall_tau)


def test_trend_needs_two_layers():
    with pytest.raises(ValueError, match="at least two"):
        trend_statistics([0.3])


def test_statistics_written_before_per_sequence_means_still_load(tmp_path, caplog):
    """A file as written before this change (no per-sequence arrays) loads, and its trend has
    every point statistic but NaN intervals, with a warning that says why."""
    generator = torch.Generator().manual_seed(3)
    accumulator = CosineAccumulator()
    accumulator.update([torch.randn(6, 10, 8, generator=generator) + 0.3 * layer for layer in range(5)])
    stats = accumulator.finalize({"model": "old", "dataset": "wiki"})
    path = tmp_path / "old.npz"
    with open(path, "wb") as handle:  # the keys the earlier save wrote, nothing else
        np.savez_compressed(
            handle, mean_cosine=stats.mean_cosine, hist_of_mean=stats.hist_of_mean, hist_pooled=stats.hist_pooled,
            layer_mean=stats.layer_mean, layer_mean_offdiag=stats.layer_mean_offdiag,
            num_sequences=np.int64(stats.num_sequences), meta=np.array('{"dataset": "wiki", "model": "old"}'),
        )
    write_manifest(path, kind="cosine_statistics")
    old = CosineStatistics.load(path)
    assert old.sequence_layer_mean is None and old.sequence_layer_mean_offdiag is None
    np.testing.assert_array_equal(old.layer_mean, stats.layer_mean)
    trend = TrendConfig(include_embedding_layer=True, include_diagonal=True)
    with caplog.at_level("WARNING", logger="condensation"):
        old_trend = depth_trend(old, trend)
    assert "old on wiki: no per-sequence layer means" in caplog.text
    new_trend = depth_trend(stats, trend)
    assert old_trend.last_n == new_trend.last_n and old_trend.depth_slope == new_trend.depth_slope
    row = old_trend.as_row()
    assert all(math.isnan(row[c]) for c in ("last_half_low", "last_half_high", "depth_slope_low", "depth_slope_high"))
    assert all(math.isfinite(v) for v in new_trend.as_row().values())
    old.save(tmp_path / "again.npz")  # and it saves again without the arrays
    with np.load(tmp_path / "again.npz") as data:
        assert "sequence_layer_mean" not in data.files


def test_trend_row_keeps_the_old_columns_first():
    means = np.linspace(0.1, 0.7, 7)
    row = trend_statistics(means, np.tile(means, (4, 1))).as_row()
    assert list(row) == [
        "spearman_rho", "kendall_tau", "last_1", "last_2", "last_3", "last_4", "last_5", "last_half",
        "last_half_low", "last_half_high", "depth_slope", "depth_slope_low", "depth_slope_high",
    ]


def test_identical_sequences_give_a_zero_width_interval():
    means = np.array([0.02, 0.1, 0.2, 0.21, 0.33])
    stats = trend_statistics(means, np.tile(means, (30, 1)))
    assert stats.last_half == pytest.approx(np.mean([0.2, 0.21, 0.33]))
    assert stats.last_half_ci[0] == stats.last_half_ci[1] == pytest.approx(stats.last_half, abs=1e-15)
    assert stats.depth_slope_ci[0] == stats.depth_slope_ci[1] == pytest.approx(stats.depth_slope, abs=1e-15)


@pytest.mark.parametrize("layers", [4, 8, 30])
def test_depth_slope_of_a_linear_profile(layers):
    """Layer means a + b * l / L give slope b whatever the depth L, with or without layer 0."""
    fraction = np.arange(layers + 1) / layers
    assert trend_statistics(0.05 + 0.3 * fraction).depth_slope == pytest.approx(0.3)
    # per-sequence slopes 0.2, 0.3, 0.4 around a shared intercept: the slope is their mean
    sequences = 0.05 + np.array([[0.2], [0.3], [0.4]] * 10) * fraction
    accumulated = CosineStatistics(
        mean_cosine=np.zeros((layers + 1, 2, 2), np.float32), hist_of_mean=np.zeros((layers + 1, NUM_BINS)),
        hist_pooled=np.zeros((layers + 1, NUM_BINS)), layer_mean=sequences.mean(axis=0),
        layer_mean_offdiag=sequences.mean(axis=0), num_sequences=30,
        sequence_layer_mean=sequences, sequence_layer_mean_offdiag=sequences,
    )
    for include_embedding_layer in (True, False):
        trend = depth_trend(accumulated, TrendConfig(include_embedding_layer, include_diagonal=False))
        assert trend.depth_slope == pytest.approx(0.3)
        low, high = trend.depth_slope_ci
        assert 0.2 < low < 0.3 < high < 0.4


def test_depth_slope_against_given_layer_positions():
    # positions 0.5, 0.75, 1 with means 1, 2, 3: slope 4 per unit fraction
    assert trend_statistics([1.0, 2.0, 3.0], layer_fraction=[0.5, 0.75, 1.0]).depth_slope == pytest.approx(4.0)
    with pytest.raises(ValueError, match="layer_fraction"):
        trend_statistics([1.0, 2.0, 3.0], layer_fraction=[0.5, 1.0])
    with pytest.raises(ValueError, match=r"sequence_means must be \[N, 3\]"):
        trend_statistics([1.0, 2.0, 3.0], np.ones((4, 2)))


def test_bootstrap_interval_covers_the_mean_and_narrows_with_more_sequences():
    rng = np.random.default_rng(7)
    true_mean, widths = 0.3, {}
    for n in (25, 100):
        hits, width = 0, []
        for _ in range(200):
            low, high = bootstrap_mean_interval(rng.normal(true_mean, 0.1, size=n))
            hits += low <= true_mean <= high
            width.append(high - low)
        assert 0.88 <= hits / 200 <= 0.99  # about 95 % of intervals hold the true mean
        widths[n] = np.mean(width)
        # the width of a 95 % interval of a mean: 2 * 1.96 * sd / sqrt(n)
        assert widths[n] == pytest.approx(2 * 1.96 * 0.1 / np.sqrt(n), rel=0.1)
    assert widths[100] / widths[25] == pytest.approx(0.5, abs=0.07)


def test_bootstrap_interval_is_deterministic_and_columnwise():
    values = np.random.default_rng(0).normal(size=(40, 3))
    both = bootstrap_mean_interval(values)
    assert both.shape == (3, 2)
    np.testing.assert_array_equal(both, bootstrap_mean_interval(values))  # the fixed seed
    np.testing.assert_array_equal(both[1], bootstrap_mean_interval(values[:, 1]))  # columns share the resamples
    assert not np.array_equal(both, bootstrap_mean_interval(values, seed=1))
    assert np.isnan(bootstrap_mean_interval(values[:1])).all()  # one sequence: no spread to resample
