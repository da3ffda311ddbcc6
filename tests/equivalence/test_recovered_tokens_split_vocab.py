"""Split-vocabulary ``sample_recovered_tokens`` (patch 0006/0003) vs pristine
vs reference.

The patch adds ``sample_recovered_tokens_split_kernel``: every draft token's vocabulary is
cut into tile-aligned slices (one program each, a running per-lane maximum, one
reduction at the end); with several slices the last program of a token (elected by an
acq_rel counter that it resets) picks the lowest slice holding the maximum, in the same
launch. ``recovered_tokens_launch_config(num_tokens, vocab_size, num_sms)`` chooses the
slices and the tile (1024 or 2048 lanes); the plan and its workspace are cached per shape.
The GPU path uses it, the CPU backend keeps the old kernel. The Triton kernels run here on
CPU through ``TRITON_INTERPRET=1``. After a shape's first (JIT) launch the GPU path calls the
compiled kernel's launcher directly, pointers as ints; the interpreter has no compiled
launcher, so a stand-in one maps the ints back to tensors and runs the interpreted kernel
(the argument order and the fast path's conditions are checked here; the real launcher,
GPU only, by the GPU benchmark on every shape).

Token ids are compared bit-exactly:
- patched == pristine == `recovered_tokens_ref` (``prob * inv_q``, lowest id among
  the maxima) on randomized inputs, for the automatic launch configuration and for
  forced ones (1 slice, 2, 3, one per tile, 2048-lane tiles), vocab below, at and above
  one tile and not a multiple of it, batch 1 .. 64 tokens, ragged requests, with and
  without draft probs, and fp64 Gumbel noise on 0.33.0;
- forced ties (q == 1, equal target mass) inside a tile, in one lane across tiles,
  across slice boundaries and in the partial last tile: the lowest id wins everywhere;
- NaN scores (q == 0) never win and never leave the vocabulary (reference semantics).
- the per-token counters are back at 0 after every launch, whatever the split.
- the fast launch passes every kernel parameter in order (a swapped pair of pointers
  fails it) and is skipped for a misaligned pointer or a registered launch hook.
A mutated tie-break fails: highest index on ties inside a slice (``>=`` in the running
maximum, ``max`` over the lanes) fails 38 of the 204 tests of this file, the last program
preferring the highest slice among equal maxima 45 (issue 21, 0.22.0; unmutated: 0).
"""

from __future__ import annotations

import contextlib
import os
from types import ModuleType, SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")  # interpreted without a GPU: see conftest.py

from verify.equivalence import recovered_tokens_ref as ref  # noqa: E402
from verify.equivalence.roots import ImportRoot  # noqa: E402

TILE = 1024
VOCABS = [100, TILE, 3 * TILE + 17, 2 * 8192 + 5]
# (num_splits, block_size, num_warps) forced on the patched side; None = automatic
CONFIGS = {
    "auto": None,
    "one_slice": (1, TILE, 4),
    "two_slices": (2, TILE, 4),
    "three_slices": (3, TILE, 4),
    "slice_per_tile": (10**6, TILE, 4),
    "wide_two_slices": (2, 2 * TILE, 8),
}


@contextlib.contextmanager
def _interpreter_env():
    """Make vLLM import real Triton with kernels as interpreter functions.

    ``vllm.triton_utils.importing`` swaps in a placeholder Triton when no driver is
    active (no GPU), except when ``CUDA_VISIBLE_DEVICES`` is set and empty (its
    "distributed environment" case); ``@triton.jit`` returns an ``InterpretedFunction``
    when ``TRITON_INTERPRET=1`` at decoration time. Both only matter while importing.
    """
    keys = ("TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ["TRITON_INTERPRET"] = "1"
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _second_vllm_import_tolerated():
    """Let one process import vLLM from several roots.

    Importing vLLM registers process-wide torch objects by name: an opaque type
    (``vllm.utils.torch_utils.LayerName``, torch >= 2.11) and ``torch.library`` ops.
    A second root's import fails with "already registered" / "multiple times". While
    importing, a duplicate opaque type reuses the first registration and duplicate
    library definitions are skipped. The rejection sampler uses neither (no custom
    ops, no torch.compile), so which root's registration wins does not matter here.
    """
    with pytest.MonkeyPatch.context() as mp:
        try:
            from torch._library import opaque_object
        except ImportError:  # torch without opaque types registers nothing
            opaque_object = None
        if opaque_object is not None and hasattr(opaque_object, "register_opaque_type"):
            register = opaque_object.register_opaque_type

            def register_unless_known(cls, *args, **kwargs):
                known = opaque_object._OPAQUE_TYPES_BY_NAME.get(
                    f"{cls.__module__}.{cls.__qualname__}"
                )
                if known is None:
                    return register(cls, *args, **kwargs)
                opaque_object._OPAQUE_TYPES[cls] = known
                return None

            mp.setattr(opaque_object, "register_opaque_type", register_unless_known)
        for name in ("define", "impl", "_register_fake"):
            method = getattr(torch.library.Library, name, None)
            if method is None:
                continue

            def skip_duplicate(self, *args, _method=method, **kwargs):
                try:
                    return _method(self, *args, **kwargs)
                except RuntimeError as e:
                    if "multiple times" in str(e) or "already" in str(e):
                        return None
                    raise

            mp.setattr(torch.library.Library, name, skip_duplicate)
        yield


def _interpreted_rejection_sampler(root: ImportRoot) -> tuple[ImportRoot, ModuleType]:
    """A private import root over `root.path` (its own module cache, so modules other
    tests imported with the Triton placeholder are not reused) and its rejection sampler."""
    if type(triton.language.max).__name__ != "InterpretedFunction":
        pytest.skip(
            "triton was imported before TRITON_INTERPRET=1 was set (or a GPU is present); "
            "run with TRITON_INTERPRET=1 in the environment"
        )
    own = ImportRoot(root.path, f"{root.label} (triton interpreter)")
    with _interpreter_env(), _second_vllm_import_tolerated():
        mod = own.load("vllm.v1.sample.rejection_sampler")
    kernel = mod.sample_recovered_tokens_kernel
    if type(kernel).__name__ != "InterpretedFunction":
        pytest.fail(f"{own}: kernel is {type(kernel)!r}, not a Triton InterpretedFunction")
    return own, mod


@pytest.fixture(scope="module")
def sides(pristine: ImportRoot, patched: ImportRoot):
    return {
        "pristine": _interpreted_rejection_sampler(pristine),
        "patched": _interpreted_rejection_sampler(patched),
    }


_GPU_PLATFORM = SimpleNamespace(is_cpu=lambda: False)


def _call(side, case, *, q_fixed=None, config=None, fp64=False):
    """``sample_recovered_tokens`` of one side on `case` with a fixed RNG state.

    On the patched side the platform is reported as a GPU (the split kernel's path)
    and `config` (if given) replaces the automatic launch configuration."""
    root, mod = side
    torch.manual_seed(case.global_seed)
    gens = {i: torch.Generator().manual_seed(s) for i, s in case.gen_seeds.items()}
    with contextlib.ExitStack() as stack, pytest.MonkeyPatch.context() as mp:
        stack.enter_context(root.active())
        if hasattr(mod, "recovered_tokens_launch_config"):
            mp.setattr(mod, "current_platform", _GPU_PLATFORM)
            if config is not None:
                mp.setattr(mod, "recovered_tokens_launch_config", lambda *a: config)
            # The plan is cached per shape: recompute it under this configuration,
            # and drop it afterwards so that no forced plan outlives the call.
            plan = getattr(mod, "_recovered_tokens_launch_plan", None)
            if plan is not None:
                plan.cache_clear()
                stack.callback(plan.cache_clear)
        if q_fixed is not None:
            assert not gens
            mp.setattr(torch.Tensor, "exponential_", lambda t, *a, **k: t.copy_(q_fixed))
        kwargs = {"use_fp64_gumbel": True} if fp64 else {}
        return mod.sample_recovered_tokens(
            case.max_spec_len,
            case.num_draft_tokens,
            case.cu,
            case.draft_ids,
            case.draft_probs,
            case.target_probs,
            SimpleNamespace(generators=gens),
            torch.device("cpu"),
            **kwargs,
        )


def _case(num_draft_tokens, vocab, with_draft, seed, gen_seeds=None):
    g = torch.Generator().manual_seed(seed)
    t = sum(num_draft_tokens)
    target = torch.softmax(torch.randn(t, vocab, generator=g) * 3, -1)
    draft = torch.softmax(torch.randn(t, vocab, generator=g) * 3, -1)
    draft_ids = torch.randint(0, vocab, (t,), generator=g, dtype=torch.int32)
    # make some draft tokens the target argmax, so the no-draft path zeroes the best entry
    draft_ids[::2] = target[::2].argmax(-1).to(torch.int32)
    return SimpleNamespace(
        num_draft_tokens=list(num_draft_tokens),
        max_spec_len=max(num_draft_tokens),
        cu=torch.tensor(num_draft_tokens).cumsum(0).to(torch.int32),
        draft_ids=draft_ids,
        draft_probs=draft if with_draft else None,
        target_probs=target,
        global_seed=seed + 1,
        gen_seeds=dict(gen_seeds or {}),
    )


def _reference(case, q):
    return ref.recovered_token_ids(
        case.cu, case.draft_ids, case.draft_probs, case.target_probs, inv_q=q.reciprocal()
    )


def _q_of(case):
    torch.manual_seed(case.global_seed)
    gens = {i: torch.Generator().manual_seed(s) for i, s in case.gen_seeds.items()}
    return ref.draw_q(case.num_draft_tokens, case.target_probs.shape[1], gens)


LAYOUTS = {
    "b1": dict(num_draft_tokens=[1]),
    "ragged": dict(num_draft_tokens=[3, 0, 1, 3], gen_seeds={0: 11, 1: 12, 3: 13}),
}


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("with_draft", [True, False], ids=["draft", "nodraft"])
@pytest.mark.parametrize("vocab", VOCABS)
def test_random_inputs(sides, vocab, with_draft, layout, config):
    case = _case(vocab=vocab, with_draft=with_draft, seed=vocab + 3 * with_draft, **LAYOUTS[layout])
    expected = _reference(case, _q_of(case))
    pristine = _call(sides["pristine"], case)
    patched = _call(sides["patched"], case, config=CONFIGS[config])
    assert torch.equal(pristine, expected)
    assert torch.equal(patched, expected)


@pytest.mark.parametrize("with_draft", [True, False], ids=["draft", "nodraft"])
def test_batch_64_tokens_auto(sides, with_draft):
    """16 requests x 4 draft tokens: the automatic configuration at a larger batch."""
    case = _case(num_draft_tokens=[4] * 16, vocab=3 * TILE + 17, with_draft=with_draft, seed=5)
    expected = _reference(case, _q_of(case))
    assert torch.equal(_call(sides["pristine"], case), expected)
    assert torch.equal(_call(sides["patched"], case), expected)


def test_fp64_gumbel_0_33_0(pin, sides):
    if pin != "0.33.0":
        pytest.skip("use_fp64_gumbel exists from 0.33.0 on (in our pins)")
    case = _case(num_draft_tokens=[2, 3], vocab=3 * TILE + 17, with_draft=True, seed=9)
    for config in (None, (3, TILE, 4)):
        assert torch.equal(
            _call(sides["patched"], case, fp64=True, config=config),
            _call(sides["pristine"], case, fp64=True),
        )


def _tie_case(vocab, with_draft, winners, value=0.25):
    """One draft token; equal target mass at `winners`, q == 1 (so equal scores)."""
    target = torch.zeros(1, vocab)
    target[0, winners] = value
    target[0, 1] = value / 2
    draft = torch.zeros(1, vocab)
    if with_draft:
        draft[0, 1] = value  # target - draft < 0 there: clamps to 0
        draft[0, 2] = 0.125
    return SimpleNamespace(
        num_draft_tokens=[1],
        max_spec_len=1,
        cu=torch.tensor([1], dtype=torch.int32),
        draft_ids=torch.tensor([vocab - 2], dtype=torch.int32),
        draft_probs=draft if with_draft else None,
        target_probs=target,
        global_seed=0,
        gen_seeds={},
    )


V3 = 3 * TILE + 17  # 4 tiles, the last one partial
TIES = {
    "within_tile": (100, [7, 8, 60]),
    "same_lane_across_tiles": (V3, [TILE + 5, 2 * TILE + 5, 5 + 3 * TILE]),
    "across_slices": (V3, [2 * TILE + 3, TILE + 9, 3 * TILE + 1]),
    "slice_boundary": (V3, [2 * TILE - 1, 2 * TILE]),
    "first_and_last_tile": (V3, [3 * TILE + 1, 5]),
    "only_partial_tile": (V3, [3 * TILE + 16, 3 * TILE + 2]),
    "all_zero": (V3, []),
}


@pytest.mark.parametrize(
    "config",
    ["auto", "one_slice", "two_slices", "three_slices", "slice_per_tile", "wide_two_slices"],
)
@pytest.mark.parametrize("with_draft", [True, False], ids=["draft", "nodraft"])
@pytest.mark.parametrize("name", sorted(TIES))
def test_forced_ties(sides, name, with_draft, config):
    vocab, winners = TIES[name]
    case = _tie_case(vocab, with_draft, winners)
    q = torch.ones(1, vocab)
    expected = min(winners) if winners else (0 if with_draft else 1)
    assert _reference(case, q).tolist() == [expected]
    assert _call(sides["pristine"], case, q_fixed=q).tolist() == [expected]
    got = _call(sides["patched"], case, q_fixed=q, config=CONFIGS[config])
    assert got.tolist() == [expected], (name, config)


@pytest.mark.parametrize("config", ["one_slice", "three_slices", "slice_per_tile"])
@pytest.mark.parametrize("with_draft", [True, False], ids=["draft", "nodraft"])
@pytest.mark.parametrize("vocab", [100, TILE + 5, V3])
def test_nan_scores_never_win(sides, vocab, with_draft, config):
    """q == 0 in the last tile: zero probs score 0 * inf = NaN there. The patched kernel
    follows the reference (NaN never wins, all-NaN rows give 0) and stays in vocab."""
    tail = (vocab - 1) // TILE * TILE
    g = torch.Generator().manual_seed(vocab)
    target = torch.rand(2, vocab, generator=g)
    target[:, tail:] = 0.0
    case = SimpleNamespace(
        num_draft_tokens=[1, 1],
        max_spec_len=1,
        cu=torch.tensor([1, 2], dtype=torch.int32),
        draft_ids=torch.tensor([0, vocab - 1], dtype=torch.int32),
        draft_probs=torch.zeros(2, vocab) if with_draft else None,
        target_probs=target,
        global_seed=0,
        gen_seeds={},
    )
    q = torch.ones(2, vocab)
    q[:, tail:] = 0.0
    got = _call(sides["patched"], case, q_fixed=q, config=CONFIGS[config])
    assert torch.equal(got, _reference(case, q))
    assert int(got.max()) < vocab


def test_launch_config(sides):
    """The documented split rule (H100: 132 SMs)."""
    cfg = sides["patched"][1].recovered_tokens_launch_config
    tiles = -(-151936 // TILE)
    assert cfg(1, 151936, 132) == (tiles, TILE, 4)  # one slice per tile
    assert cfg(32, 151936, 132) == (33, TILE, 4)  # ~8 programs per SM
    assert cfg(128, 151936, 132) == (8, TILE, 4)
    assert cfg(256, 151936, 132) == (2, 2 * TILE, 8)  # 2..4 slices: wider tile
    assert cfg(512, 151936, 132) == (1, 2 * TILE, 8)
    assert cfg(1024, 151936, 132) == (1, TILE, 4)  # tokens fill the GPU
    assert cfg(1, 100, 132) == (1, TILE, 4)  # vocab below one tile
    assert cfg(0, 151936, 132)[0] == 1
    for num_tokens in range(1, 3000, 11):
        for vocab in (100, 32000, 128256, 151936):
            for sms in (16, 78, 132):
                s, block, warps = cfg(num_tokens, vocab, sms)
                assert (block, warps) in ((TILE, 4), (2 * TILE, 8))
                assert 1 <= s <= max(1, -(-vocab // block))
                assert s == 1 or num_tokens * s * warps <= 4 * 8 * sms


def test_cpu_platform_keeps_old_kernel(sides):
    """On the CPU backend (which swaps in a native kernel of the old signature) the
    patched module launches the old kernel."""
    root, mod = sides["patched"]
    case = _case(num_draft_tokens=[2], vocab=V3, with_draft=False, seed=1)
    calls = []

    def no_split(*args, **kwargs):
        calls.append(args)
        raise AssertionError("split path taken on the CPU platform")

    torch.manual_seed(case.global_seed)
    with root.active(), pytest.MonkeyPatch.context() as mp:
        mp.setattr(mod, "current_platform", SimpleNamespace(is_cpu=lambda: True))
        mp.setattr(mod, "_launch_sample_recovered_tokens", no_split)
        out = mod.sample_recovered_tokens(
            case.max_spec_len,
            case.num_draft_tokens,
            case.cu,
            case.draft_ids,
            None,
            case.target_probs,
            SimpleNamespace(generators={}),
            torch.device("cpu"),
        )
    assert not calls
    assert torch.equal(out, _reference(case, _q_of(case)))


def test_counters_back_to_zero_between_launches(sides):
    """The split kernel's last-program election leaves every per-token counter at 0, so
    launches of any split and layout can follow each other on the shared workspace
    (a counter left behind would make the next launch reduce too early, or never)."""
    _, mod = sides["patched"]
    workspaces = getattr(mod, "_recovered_tokens_workspaces", None)
    if workspaces is None:
        pytest.skip("this patched kernel reduces in a second kernel (no counters)")
    runs = [
        ("three_slices", "ragged", True),
        ("slice_per_tile", "b1", False),
        ("wide_two_slices", "ragged", False),
        ("two_slices", "ragged", True),
        ("auto", "b1", True),
    ]
    for i, (config, layout, with_draft) in enumerate(runs):
        case = _case(vocab=V3, with_draft=with_draft, seed=40 + i, **LAYOUTS[layout])
        got = _call(sides["patched"], case, config=CONFIGS[config])
        assert torch.equal(got, _reference(case, _q_of(case))), config
        assert workspaces, "no workspace after a split launch"
        for _, counters in workspaces.values():
            assert int(counters.abs().sum()) == 0, config


class _CompiledOnInterpreter:
    """Stands in for the CompiledKernel a CUDA launch returns, on the interpreter.

    ``run`` takes what Triton's JIT passes ``CompiledKernel.run`` (grid, stream,
    CUfunction, packed metadata, launch metadata and hooks, then every kernel
    parameter in order, pointers as ints) and runs the interpreted kernel on the
    tensors those ints point at, so a parameter passed out of order or a wrong
    pointer gives wrong ids (or a KeyError)."""

    function = 0xF00
    packed_metadata = (4, 1, 0)
    stream = 0x5EA

    def __init__(self, kernel):
        self.kernel = kernel
        self.tensors: dict[int, torch.Tensor] = {}
        self.jit_launches = 0
        self.fast_launches = 0

    def jit(self, grid):
        def launch(*args, **kwargs):
            self.jit_launches += 1
            self.kernel[grid](*args, **kwargs)
            return self

        return launch

    def run(self, gx, gy, gz, stream, function, metadata, launch_metadata, *rest):
        enter_hook, exit_hook, *params = rest
        assert (stream, function, metadata) == (self.stream, self.function, self.packed_metadata)
        assert launch_metadata is None and enter_hook is None and exit_hook is None
        assert len(params) == len(self.kernel.arg_names)
        self.fast_launches += 1
        args = {
            name: self.tensors[value] if name.endswith("_ptr") and value is not None else value
            for name, value in zip(self.kernel.arg_names, params, strict=True)
        }
        self.kernel[(gx, gy, gz)](**args)


# (with draft probs, misaligned output, launch hook registered, JIT launches so far,
# fast launches so far): one launch per dtype key goes through the JIT first.
FAST_LAUNCH_RUNS = [
    (True, False, False, 1, 0),
    (False, False, False, 2, 0),
    (True, False, False, 2, 1),
    (False, False, False, 2, 2),
    (False, True, False, 3, 2),
    (True, False, True, 4, 2),
    (True, False, False, 4, 3),
]


def test_fast_launch_passes_the_kernel_parameters_in_order(sides):
    """After the first (JIT) launch of a shape, later launches go through the cached
    compiled launcher with pointers as ints; on the interpreter a stand-in launcher
    maps them back to tensors: ids equal the reference. A misaligned pointer and a
    registered launch hook take the JIT path instead."""
    _, mod = sides["patched"]
    if not hasattr(mod, "_compiled_launch"):
        pytest.skip("this patched kernel has no cached compiled launch")
    compiled = _CompiledOnInterpreter(mod.sample_recovered_tokens_split_kernel)
    knobs = getattr(triton, "knobs", None)
    if knobs is None or not hasattr(knobs.runtime.launch_enter_hook, "calls"):
        pytest.skip("this Triton has no launch-hook chains (the fast path is off)")
    plan = mod._recovered_tokens_launch_plan
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mod, "sample_recovered_tokens_split_kernel", _JitStandIn(compiled))
        mp.setattr(mod, "recovered_tokens_launch_config", lambda *a: (3, TILE, 4))
        mp.setattr(mod, "_cuda_current_device", lambda: 0)
        mp.setattr(mod, "_cuda_current_raw_stream", lambda index: compiled.stream)
        mp.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
        plan.cache_clear()
        try:
            for i, (with_draft, misaligned, hooked, jit, fast) in enumerate(FAST_LAUNCH_RUNS):
                case = _case(num_draft_tokens=[3, 1], vocab=V3, with_draft=with_draft, seed=60 + i)
                q = _q_of(case)
                inv_q = q.reciprocal()
                # misaligned: 4 bytes past an aligned allocation
                out = torch.full((5,), -1, dtype=torch.int32)[1 if misaligned else 0 :][:4]
                tensors = [out, case.cu, case.draft_ids, case.target_probs, inv_q]
                tensors += [case.draft_probs] if with_draft else []
                workspace = plan(4, V3, out.device)
                tensors += [workspace.partials, workspace.counters]
                compiled.tensors = {t.data_ptr(): t for t in tensors}
                if hooked:
                    knobs.runtime.launch_enter_hook.add(_no_hook)
                try:
                    mod._launch_sample_recovered_tokens(
                        out, case.cu, case.draft_ids, case.draft_probs, case.target_probs,
                        inv_q, case.max_spec_len,
                    )  # fmt: skip
                finally:
                    if hooked:
                        knobs.runtime.launch_enter_hook.remove(_no_hook)
                assert torch.equal(out, _reference(case, q)), i
                assert (compiled.jit_launches, compiled.fast_launches) == (jit, fast), i
                assert int(workspace.counters.abs().sum()) == 0
        finally:
            plan.cache_clear()


def _no_hook(*_args):
    return None


class _JitStandIn:
    """``kernel[grid](...)`` of the JIT, returning the stand-in CompiledKernel."""

    def __init__(self, compiled: _CompiledOnInterpreter):
        self.compiled = compiled

    def __getitem__(self, grid):
        return self.compiled.jit(grid)
