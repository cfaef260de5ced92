"""TokenBatches and the native loader from Python: the documented order, identical batches for
torch and JAX, zero-copy lifetime, fixed evaluation batches, --data resolution, bad input."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from fixtures.samples import TRAIN, VALID

pytest.importorskip("tokenizers")

from parallax import _native  # noqa: E402
from parallax.spec.config import RunConfig  # noqa: E402
from parallax.data.loader import TokenBatches, cache_dir, resolve_data  # noqa: E402
from parallax.data.prepare import PreparedData  # noqa: E402
from parallax.data.source import make_batch_source  # noqa: E402
from parallax.errors import ParallaxError  # noqa: E402

B, S = 4, 32
M64 = (1 << 64) - 1


def mix64(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def reference_order(n: int, seed: int, epoch: int) -> list[int]:
    """docs/data.md's window order, written again from the text."""
    state = mix64((mix64(seed) + epoch) & M64)

    def below(bound: int) -> int:
        nonlocal state
        threshold = (1 << 64) % bound
        while True:
            state = (state + 0x9E3779B97F4A7C15) & M64
            x = mix64(state)
            if x >= threshold:
                return x % bound

    order = list(range(n))
    for i in range(n - 1, 0, -1):
        j = below(i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def batches(data, seed=7, **kw) -> TokenBatches:
    return TokenBatches(data, batch_size=B, seq_len=S, seed=seed, vocab_size=10_000, **kw)


def test_window_order_is_the_documented_algorithm():
    for n, seed, epoch in ((1, 0, 0), (10, 0, 0), (97, 5, 3), (1000, 2**63 + 11, 1)):
        assert _native.window_order(n, seed, epoch).tolist() == reference_order(n, seed, epoch)


def test_batch_k_is_the_documented_windows_of_train_bin(prepared):
    tokens = np.fromfile(prepared.path("train"), dtype="<u2", offset=64)
    n = (tokens.size - 1) // S
    with batches(prepared) as source:
        it = iter(source)
        for k in range(5):
            batch = next(it)
            assert batch.dtype == np.int32 and batch.shape == (B, S + 1)
            for i in range(B):
                draw = k * B + i
                w = reference_order(n, 7, draw // n)[draw % n]
                np.testing.assert_array_equal(batch[i], tokens[w * S: w * S + S + 1])


def test_one_seed_gives_identical_batches_in_torch_and_jax(prepared):
    torch = pytest.importorskip("torch")
    jnp = pytest.importorskip("jax.numpy")
    with batches(prepared) as a, batches(prepared) as b, batches(prepared, seed=8) as c:
        ia, ib, ic = iter(a), iter(b), iter(c)
        differs = False
        for _ in range(6):
            x, y, z = next(ia), next(ib), next(ic)
            as_torch = torch.from_numpy(x)
            as_jax = jnp.asarray(y)
            assert as_torch.dtype == torch.int32 and as_jax.dtype == jnp.int32
            assert torch.equal(as_torch, torch.from_numpy(np.array(as_jax)))  # a copy: JAX arrays are read-only
            np.testing.assert_array_equal(as_torch.numpy(), np.asarray(as_jax))
            differs = differs or not np.array_equal(x, z)
        assert differs  # another seed, another order


def test_arrays_are_zero_copy_and_stay_valid_while_held(prepared):
    with batches(prepared) as source, batches(prepared) as twin:
        it, reference = iter(source), iter(twin)
        held = [next(it) for _ in range(6)]  # more than the ring's 4 slots: it grows
        copies = [next(reference).copy() for _ in range(6)]
        for _ in range(20):
            next(it)
        for array, expected in zip(held, copies):
            np.testing.assert_array_equal(array, expected)
        info = source.info()["loader"]
        assert info["slots"] >= 7 and info["batches_taken"] == 26
        assert info["pin_status"].startswith(("pinned", "pageable"))
        # The array is the ring's memory, not a copy: NumPy does not own it.
        assert not held[0].flags["OWNDATA"]
    source.close()
    np.testing.assert_array_equal(held[-1], copies[-1])  # still valid after close
    assert next(iter(source), None) is None  # a closed loader ends iteration


def test_pinned_is_the_drivers_word_on_every_slot(prepared):
    with batches(prepared) as source, batches(prepared, pin=False) as unpinned:
        info = source.info()["loader"]
        assert source.pinned is info["pinned_verified"]
        assert source.pinned == (info["verified_slots"] == info["slots"] == 4)
        batch = next(iter(source))
        assert source._loader.page_locked(batch) is source.pinned
        assert not source._loader.page_locked(np.array(batch))  # a pageable copy, GPU or not
        assert unpinned.pinned is False and unpinned.info()["loader"]["verified_slots"] == 0


def test_eval_batches_are_fixed_evenly_spread_and_seed_independent(prepared):
    valid = np.fromfile(prepared.path("validation"), dtype="<u2", offset=64)
    n = (valid.size - 1) // S
    with batches(prepared, seed=1, eval_batches=3) as a, batches(prepared, seed=2, eval_batches=3) as b:
        evals = a.eval_batches()
        assert len(evals) == 3 and all(e.shape == (B, S + 1) and e.dtype == np.int32 for e in evals)
        for x, y in zip(evals, b.eval_batches()):
            np.testing.assert_array_equal(x, y)
        windows = [(j * n) // (3 * B) for j in range(3 * B)]
        np.testing.assert_array_equal(np.concatenate(evals), np.stack([valid[w * S: w * S + S + 1] for w in windows]))
    with batches(prepared) as none:
        assert none.eval_batches() == []


def test_too_few_tokens_says_how_many_and_names_epochs(prepared):
    n = prepared.tokens("train")
    windows = (n - 1) // 1024
    steps = windows // 2 + 1  # batch 2: one window more than the data holds
    with pytest.raises(ParallaxError) as info:
        TokenBatches(prepared, batch_size=2, seq_len=1024, seed=0, vocab_size=10_000, steps=steps)
    message = str(info.value)
    assert f"holds {n:,} training tokens, {windows:,} sequences of 1025 tokens" in message
    assert f"need {2 * steps:,} sequences ({2 * steps * 1024 + 1:,} tokens)" in message
    assert message.endswith(f"allow repeated tokens with --epochs {math.ceil(2 * steps / windows * 100) / 100:g}")
    assert message.endswith("--epochs 1.03")  # 98 of 96 sequences (98,709 training tokens)
    # Allowing repetition explicitly lets it run, and batches continue into the second epoch.
    with TokenBatches(prepared, batch_size=2, seq_len=1024, seed=0, vocab_size=10_000, steps=steps, epochs=1.5) as ok:
        assert ok.n_windows == windows
    with pytest.raises(ParallaxError, match=r"within --epochs 1.5: .* --epochs 2.21$"):  # 212 / 96
        TokenBatches(prepared, batch_size=2, seq_len=1024, seed=0, vocab_size=10_000, steps=windows + 10, epochs=1.5)


def test_wrong_vocab_short_validation_and_damaged_files_are_errors(prepared, tmp_path):
    with pytest.raises(ParallaxError, match=r"tokenized with a 10,000-token vocabulary but the model has 32,000"):
        TokenBatches(prepared, batch_size=B, seq_len=S, seed=0, vocab_size=32_000)
    with pytest.raises(ParallaxError, match=r"validation tokens.* lower --eval-batches"):
        TokenBatches(prepared, batch_size=64, seq_len=1024, seed=0, vocab_size=10_000, eval_batches=8)
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(prepared.directory, broken)
    os.truncate(broken / "train.bin", 1000)
    data = PreparedData(broken, prepared.meta)
    with pytest.raises(ParallaxError, match=rf"token file {broken / 'train.bin'}: truncated"):
        TokenBatches(data, batch_size=B, seq_len=S, seed=0, vocab_size=10_000)


def test_run_with_a_prepared_directory_or_a_raw_corpus(prepared, tmp_path, monkeypatch):
    monkeypatch.setenv("PARALLAX_CACHE_DIR", str(tmp_path / "cache"))
    run = RunConfig(model="tiny", batch_size=B, seq_len=S, steps=10, warmup=2, synthetic=False,
                    data=str(prepared.directory), eval_every=5, eval_batches=2)
    source = make_batch_source(run)
    try:
        assert isinstance(source, TokenBatches) and len(source.eval_batches()) == 2
        assert str(prepared.directory) in source.description
    finally:
        source.close()
    # A raw corpus: prepared on first use into the cache, reused afterwards.
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").symlink_to(TRAIN)
    (corpus / "b.txt").symlink_to(VALID)
    logged = []
    raw = run.replace(data=str(corpus))
    first = resolve_data(raw, logged.append)
    assert first.directory == cache_dir([str(corpus)], first_options(raw))
    assert first.meta["splits"]["train"]["sha256"] == prepared.meta["splits"]["train"]["sha256"]
    assert any("preparing" in line for line in logged)
    logged.clear()
    assert resolve_data(raw, logged.append).meta == first.meta and logged == []
    with pytest.raises(ParallaxError, match=r"--data .*missing: no such file or directory"):
        resolve_data(run.replace(data=str(tmp_path / "missing")))


def first_options(run):
    from parallax.spec.config import DataConfig

    return DataConfig(vocab_size=run.model_config.vocab_size)


def test_epochs_must_be_positive():
    with pytest.raises(ParallaxError, match="--epochs must be positive"):
        RunConfig(epochs=0).validate()
    assert RunConfig(epochs=2.5).validate().epochs == 2.5
