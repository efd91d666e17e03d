"""Checkpoint folders: save/load round trips, the shipped demo policy, and every way loading can fail.

The contract under test: ``load_checkpoint`` (and ``load_policy`` on a folder) either returns a
working module or raises :class:`PolicyLoadError` naming the problem; it never unpickles
anything, and no other exception escapes, whatever bytes are in the folder.
"""

from __future__ import annotations

import json
import pickle
import shutil
import struct
import tempfile
from pathlib import Path

import gymnasium as gym
import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

import fasteval
from fasteval import evaluate
from fasteval.types.errors import PolicyLoadError, UserInputError
from fasteval.robot.policies import MLPPolicy, load_checkpoint, load_policy, save_checkpoint
from fasteval.robot.policies.checkpoint import CONFIG_NAME, WEIGHTS_NAME

DEMO = Path(fasteval.__file__).parent / "assets" / "cartpole_mlp"
CARTPOLE_OBS = gym.spaces.Box(-float("inf"), float("inf"), shape=(4,))
CARTPOLE_ACT = gym.spaces.Discrete(2)


def _small_policy(seed: int = 0, **kwargs) -> MLPPolicy:
    torch.manual_seed(seed)
    args = dict(obs_dim=4, action_dim=2, hidden_sizes=(8, 8), activation="tanh", action_head="argmax")
    args.update(kwargs)
    return MLPPolicy(**args)


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    """A valid checkpoint folder of a small MLP (hidden (8, 8))."""
    return save_checkpoint(_small_policy(), tmp_path / "ckpt")


def _load_error(folder: Path) -> str:
    with pytest.raises(PolicyLoadError) as info:
        load_checkpoint(folder)
    return str(info.value)


# -- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(),
        dict(obs_dim=3, action_dim=5, hidden_sizes=(16,), activation="relu", action_head="argmax"),
        dict(obs_dim=6, action_dim=2, hidden_sizes=(), activation="tanh", action_head="tanh"),
        dict(obs_dim=2, action_dim=3, hidden_sizes=(4, 4, 4), activation="relu", action_head="linear"),
    ],
)
def test_round_trip_same_outputs(tmp_path: Path, kwargs) -> None:
    policy = _small_policy(seed=1, **kwargs).eval()
    folder = save_checkpoint(policy, tmp_path / "p")
    assert sorted(p.name for p in folder.iterdir()) == [CONFIG_NAME, WEIGHTS_NAME]
    loaded = load_checkpoint(folder)
    assert isinstance(loaded, MLPPolicy) and not loaded.training
    assert loaded.config == policy.config
    for (k1, v1), (k2, v2) in zip(policy.state_dict().items(), loaded.state_dict().items()):
        assert k1 == k2 and torch.equal(v1, v2)
    obs = torch.randn(64, policy.config["obs_dim"], generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(policy.logits(obs), loaded.logits(obs))
        assert torch.equal(policy(obs), loaded(obs))


def test_load_policy_reads_checkpoint_folder(ckpt: Path) -> None:
    policy = load_policy(str(ckpt), CARTPOLE_OBS, CARTPOLE_ACT, n_slots=4)
    assert isinstance(policy, MLPPolicy)
    assert policy(torch.zeros(4, 4)).shape == (4,)


def test_save_with_explicit_config(tmp_path: Path) -> None:
    policy = _small_policy()
    config = dict(policy.config)
    del policy.config  # the explicit config must be used, not the attribute
    folder = save_checkpoint(policy, tmp_path / "explicit", config=config)
    assert json.loads((folder / CONFIG_NAME).read_text()) == config
    assert isinstance(load_checkpoint(folder), MLPPolicy)


# -- the shipped demo checkpoint --------------------------------------------------------------


def test_demo_checkpoint_is_shipped_and_loads() -> None:
    assert (DEMO / CONFIG_NAME).is_file() and (DEMO / WEIGHTS_NAME).is_file()
    assert (DEMO / WEIGHTS_NAME).stat().st_size < 64_000
    policy = load_checkpoint(DEMO)
    assert policy.config["obs_dim"] == 4 and policy.config["action_dim"] == 2
    assert policy.config["action_head"] == "argmax"


def test_demo_checkpoint_balances_cartpole() -> None:
    result = evaluate(env="CartPole-v1", policy=str(DEMO), n_episodes=20, seed=0, batch_size=20, device="cpu")
    assert result.overall()["n_episodes"] == 20
    assert result.overall()["avg_sum_reward"] > 450


# -- failures: each one a PolicyLoadError that names the problem -------------------------------


def test_missing_weights(ckpt: Path) -> None:
    (ckpt / WEIGHTS_NAME).unlink()
    msg = _load_error(ckpt)
    assert "missing" in msg and WEIGHTS_NAME in msg


def test_weights_path_is_a_folder(ckpt: Path) -> None:
    (ckpt / WEIGHTS_NAME).unlink()
    (ckpt / WEIGHTS_NAME).mkdir()
    assert WEIGHTS_NAME in _load_error(ckpt)


@pytest.mark.parametrize(
    "garbage",
    [b"", b"\x00", b"not a safetensors file at all" * 10, bytes(range(256)) * 4,
     struct.pack("<Q", 2**63) + b"{}", struct.pack("<Q", 8) + b"[1,2,3]!"],
)
def test_garbage_weights(ckpt: Path, garbage: bytes) -> None:
    (ckpt / WEIGHTS_NAME).write_bytes(garbage)
    msg = _load_error(ckpt)
    assert WEIGHTS_NAME in msg


def test_empty_but_valid_safetensors(ckpt: Path) -> None:
    (ckpt / WEIGHTS_NAME).write_bytes(struct.pack("<Q", 2) + b"{}")  # a well-formed file with no tensors
    assert "missing keys: ['net.0.bias', 'net.0.weight'" in _load_error(ckpt)


@pytest.mark.parametrize("keep", [0.0, 0.01, 0.1, 0.5, 0.9, 0.99])
def test_truncated_weights(ckpt: Path, keep: float) -> None:
    data = (ckpt / WEIGHTS_NAME).read_bytes()
    (ckpt / WEIGHTS_NAME).write_bytes(data[: int(len(data) * keep)])
    msg = _load_error(ckpt)
    assert "corrupt or truncated" in msg and WEIGHTS_NAME in msg


def test_truncated_by_one_byte(ckpt: Path) -> None:
    data = (ckpt / WEIGHTS_NAME).read_bytes()
    (ckpt / WEIGHTS_NAME).write_bytes(data[:-1])
    assert "corrupt or truncated" in _load_error(ckpt)


@pytest.mark.parametrize("text", ["", "{", "not json", "{'architecture': 'mlp'}", "\ufeff{}x", "[1, 2"])
def test_config_not_json(ckpt: Path, text: str) -> None:
    (ckpt / CONFIG_NAME).write_text(text)
    msg = _load_error(ckpt)
    assert CONFIG_NAME in msg and "JSON" in msg


def test_config_not_utf8(ckpt: Path) -> None:
    (ckpt / CONFIG_NAME).write_bytes(b"\xff\xfe{\x00}\x00\x80")
    assert CONFIG_NAME in _load_error(ckpt)


@pytest.mark.parametrize("value", ["[]", "3", "null", '"mlp"', "true"])
def test_config_not_an_object(ckpt: Path, value: str) -> None:
    (ckpt / CONFIG_NAME).write_text(value)
    assert "JSON object" in _load_error(ckpt)


def test_config_pathological_json(ckpt: Path) -> None:
    (ckpt / CONFIG_NAME).write_text("[" * 100_000 + "]" * 100_000)  # RecursionError in json
    assert CONFIG_NAME in _load_error(ckpt)
    (ckpt / CONFIG_NAME).write_text('{"obs_dim": ' + "9" * 10_000 + "}")  # int-string conversion limit
    assert CONFIG_NAME in _load_error(ckpt)


@pytest.mark.parametrize("arch", ["transformer", "MLP", "", None, 3, [], {}, ["mlp"]])
def test_unknown_architecture(ckpt: Path, arch) -> None:
    config = json.loads((ckpt / CONFIG_NAME).read_text())
    config["architecture"] = arch
    (ckpt / CONFIG_NAME).write_text(json.dumps(config))
    msg = _load_error(ckpt)
    assert "unknown architecture" in msg and "'mlp'" in msg


def test_missing_architecture(ckpt: Path) -> None:
    config = json.loads((ckpt / CONFIG_NAME).read_text())
    del config["architecture"]
    (ckpt / CONFIG_NAME).write_text(json.dumps(config))
    assert "unknown architecture None" in _load_error(ckpt)


@pytest.mark.parametrize(
    "change",
    [
        {"obs_dim": None}, {"obs_dim": "four"}, {"obs_dim": -1}, {"obs_dim": float("inf")}, {"obs_dim": float("nan")},
        {"action_dim": [2]}, {"hidden_sizes": 8}, {"hidden_sizes": [-8]}, {"hidden_sizes": ["x"]},
        {"activation": "gelu"}, {"activation": []}, {"action_head": "softmax"}, {"action_head": {}},
    ],
)
def test_invalid_mlp_config(ckpt: Path, change: dict) -> None:
    config = json.loads((ckpt / CONFIG_NAME).read_text())
    config.update(change)
    (ckpt / CONFIG_NAME).write_text(json.dumps(config))
    assert "does not describe a valid mlp" in _load_error(ckpt)


def test_missing_required_config_key(ckpt: Path) -> None:
    config = json.loads((ckpt / CONFIG_NAME).read_text())
    del config["obs_dim"]
    (ckpt / CONFIG_NAME).write_text(json.dumps(config))
    msg = _load_error(ckpt)
    assert "does not describe a valid mlp" in msg and "obs_dim" in msg


def test_huge_sizes_do_not_allocate(ckpt: Path) -> None:
    """Sizes far beyond memory fail cleanly, before any allocation (the config is built on ``meta``)."""
    config = json.loads((ckpt / CONFIG_NAME).read_text())
    config.update(obs_dim=10**6, hidden_sizes=[10**6, 10**6])  # 10^12 weights: 4 TB
    (ckpt / CONFIG_NAME).write_text(json.dumps(config))
    assert "net.2.weight: expected (1000000, 1000000), got (8, 8)" in _load_error(ckpt)
    config.update(obs_dim=10**12, hidden_sizes=[10**12])  # overflows torch's size arithmetic
    (ckpt / CONFIG_NAME).write_text(json.dumps(config))
    assert "does not describe a valid mlp" in _load_error(ckpt)


def test_key_mismatch_names_missing_and_unexpected_keys(ckpt: Path) -> None:
    state = _small_policy().state_dict()
    state["head.extra_weight"] = state.pop("net.2.bias")
    del state["net.4.weight"]
    save_file({k: v.contiguous() for k, v in state.items()}, str(ckpt / WEIGHTS_NAME))
    msg = _load_error(ckpt)
    assert "missing keys: ['net.2.bias', 'net.4.weight']" in msg
    assert "unexpected keys: ['head.extra_weight']" in msg


def test_extra_key_only(ckpt: Path) -> None:
    state = dict(_small_policy().state_dict())
    state["step_count"] = torch.tensor([3])
    save_file(state, str(ckpt / WEIGHTS_NAME))
    msg = _load_error(ckpt)
    assert "missing keys: none" in msg and "unexpected keys: ['step_count']" in msg


def test_shape_mismatch(ckpt: Path) -> None:
    save_file(_small_policy(hidden_sizes=(8, 16)).state_dict(), str(ckpt / WEIGHTS_NAME))
    msg = _load_error(ckpt)
    assert "shapes do not match" in msg
    assert "net.2.weight: expected (8, 8), got (16, 8)" in msg
    assert "net.4.weight: expected (2, 8), got (2, 16)" in msg


def test_complex_weights_refused(ckpt: Path) -> None:
    state = {k: v.to(torch.complex64) for k, v in _small_policy().state_dict().items()}
    save_file(state, str(ckpt / WEIGHTS_NAME))
    assert "complex" in _load_error(ckpt)


def test_other_real_dtypes_load(ckpt: Path) -> None:
    policy = _small_policy()
    save_file({k: v.double() for k, v in policy.state_dict().items()}, str(ckpt / WEIGHTS_NAME))
    loaded = load_checkpoint(ckpt)
    for v1, v2 in zip(policy.state_dict().values(), loaded.state_dict().values()):
        assert v2.dtype == torch.float32 and torch.equal(v1, v2)


# -- folders, files and code references --------------------------------------------------------


def test_folder_without_config(tmp_path: Path) -> None:
    folder = tmp_path / "weights_only"
    folder.mkdir()
    save_file(_small_policy().state_dict(), str(folder / WEIGHTS_NAME))
    with pytest.raises(PolicyLoadError, match="config.json"):
        load_policy(str(folder), CARTPOLE_OBS, CARTPOLE_ACT, n_slots=1)
    with pytest.raises(PolicyLoadError, match="config.json"):
        load_checkpoint(folder)


def test_config_json_is_a_folder(ckpt: Path) -> None:
    (ckpt / CONFIG_NAME).unlink()
    (ckpt / CONFIG_NAME).mkdir()
    assert CONFIG_NAME in _load_error(ckpt)


def test_load_checkpoint_on_a_file(ckpt: Path) -> None:
    assert CONFIG_NAME in _load_error(ckpt / WEIGHTS_NAME)


class _Bomb:
    """Unpickling this writes a marker file: proof that something unpickled it."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path(self.marker).write_text, ("unpickled!",))


@pytest.mark.parametrize("suffix", [".pt", ".pth", ".bin", ".pkl", ".ckpt"])
def test_bare_pickle_file_refused_never_unpickled(tmp_path: Path, suffix: str) -> None:
    marker = tmp_path / "marker.txt"
    path = tmp_path / f"model{suffix}"
    with path.open("wb") as fh:
        pickle.dump(_Bomb(str(marker)), fh)
    with pytest.raises(PolicyLoadError, match="never pickled code") as info:
        load_policy(str(path), CARTPOLE_OBS, CARTPOLE_ACT, n_slots=1)
    assert suffix in str(info.value)
    assert not marker.exists()


def test_bare_torch_save_file_refused(tmp_path: Path) -> None:
    path = tmp_path / "policy.pt"
    torch.save(_small_policy(), path)
    with pytest.raises(PolicyLoadError, match=r"bare \.pt file"):
        evaluate(env="CartPole-v1", policy=str(path), n_episodes=1, device="cpu")


REMOTE_CODE = '''
from pathlib import Path
Path({marker!r}).write_text("module code ran")

from fasteval.robot.policies import MLPPolicy

def make_policy(observation_space, action_space):
    return MLPPolicy(obs_dim=observation_space.shape[0], action_dim=int(action_space.n), hidden_sizes=(4,))
'''


def test_callable_from_file_path_needs_trust_remote_code(tmp_path: Path) -> None:
    marker = tmp_path / "ran.txt"
    source = tmp_path / "fasteval_test_remote_policy.py"
    source.write_text(REMOTE_CODE.format(marker=str(marker)))
    ref = f"{source}:make_policy"

    with pytest.raises(UserInputError, match="trust-remote-code"):
        load_policy(ref, CARTPOLE_OBS, CARTPOLE_ACT, n_slots=2)
    assert not marker.exists(), "the file's code ran without trust_remote_code"

    policy = load_policy(ref, CARTPOLE_OBS, CARTPOLE_ACT, n_slots=2, trust_remote_code=True)
    assert marker.exists()
    assert isinstance(policy, MLPPolicy) and policy.config["obs_dim"] == 4 and policy.config["action_dim"] == 2


# -- fuzzing: a successful load or a PolicyLoadError, nothing else -----------------------------

_VALID_CONFIG = _small_policy().config
_VALID_WEIGHTS: bytes = b""


def _valid_weights() -> bytes:
    global _VALID_WEIGHTS
    if not _VALID_WEIGHTS:
        with tempfile.TemporaryDirectory() as tmp:
            folder = save_checkpoint(_small_policy(), Path(tmp))
            _VALID_WEIGHTS = (folder / WEIGHTS_NAME).read_bytes()
    return _VALID_WEIGHTS


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)
small_ints = st.integers(min_value=-3, max_value=12)
config_field_values = {
    "architecture": st.sampled_from(["mlp", "MLP", ""]) | json_values,
    "obs_dim": small_ints | json_values,
    "action_dim": small_ints | json_values,
    "hidden_sizes": st.lists(small_ints, max_size=3) | json_values,
    "activation": st.sampled_from(["tanh", "relu", "gelu"]) | json_values,
    "action_head": st.sampled_from(["argmax", "tanh", "linear", "softmax"]) | json_values,
}


@st.composite
def mutated_configs(draw) -> str:
    """The valid config with some fields replaced by random values or dropped."""
    config = dict(_VALID_CONFIG)
    for key in draw(st.lists(st.sampled_from(sorted(config_field_values)), unique=True, max_size=3)):
        if draw(st.booleans()):
            config[key] = draw(config_field_values[key])
        else:
            config.pop(key)
    if draw(st.booleans()):
        config[draw(st.text(max_size=8))] = draw(json_values)
    return json.dumps(config)


config_texts = st.one_of(
    st.just(json.dumps(_VALID_CONFIG)),
    mutated_configs(),
    json_values.map(json.dumps),
    st.text(max_size=200),
)


@st.composite
def mutated_weights(draw) -> bytes:
    data = bytearray(_valid_weights())
    how = draw(st.sampled_from(["flip", "truncate", "append", "header"]))
    if how == "flip":
        for _ in range(draw(st.integers(1, 8))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    elif how == "truncate":
        del data[draw(st.integers(0, len(data) - 1)):]
    elif how == "append":
        data += draw(st.binary(min_size=1, max_size=64))
    else:  # a random header (random JSON) in front of the real data
        header = json.dumps(draw(json_values)).encode()
        (n,) = struct.unpack("<Q", data[:8])
        if draw(st.booleans()):
            header += b" " * max(0, n - len(header))  # sometimes keep the declared length plausible
        data = bytearray(struct.pack("<Q", len(header)) + header + bytes(data[8 + n:]))
    return bytes(data)


@st.composite
def random_headers(draw) -> bytes:
    """A well-framed safetensors file whose header declares random tensors."""
    tensors = draw(st.dictionaries(
        st.sampled_from(["net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias", "net.4.weight", "net.4.bias", "x"]),
        st.fixed_dictionaries({
            "dtype": st.sampled_from(["F32", "F64", "F16", "BF16", "I64", "I8", "U8", "BOOL", "C64", "F8_E4M3", "F4", "XX"]),
            "shape": st.lists(st.integers(0, 10), max_size=3),
            "data_offsets": st.lists(st.integers(0, 2048), min_size=2, max_size=2).map(sorted),
        }),
        max_size=6,
    ))
    header = json.dumps(tensors).encode()
    body = draw(st.binary(max_size=2048))
    return struct.pack("<Q", len(header)) + header + body


weight_blobs = st.one_of(
    st.builds(_valid_weights),
    mutated_weights(),
    random_headers(),
    st.binary(max_size=256),
    st.none(),  # no weights file
)


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors:UserWarning")
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=config_texts, weights=weight_blobs)
def test_fuzz_loading_only_succeeds_or_raises_policy_load_error(config: str, weights: bytes | None) -> None:
    folder = Path(tempfile.mkdtemp(prefix="fasteval-fuzz-"))
    try:
        (folder / CONFIG_NAME).write_text(config, encoding="utf-8", errors="surrogatepass")
        if weights is not None:
            (folder / WEIGHTS_NAME).write_bytes(weights)
        for load in (lambda: load_checkpoint(folder), lambda: load_policy(str(folder), CARTPOLE_OBS, CARTPOLE_ACT, n_slots=2)):
            try:
                module = load()
            except PolicyLoadError as exc:
                assert str(exc)
                event("PolicyLoadError")
            else:
                event("loaded")
                assert isinstance(module, torch.nn.Module)
                cfg = module.config
                with torch.no_grad():
                    module(torch.zeros(2, cfg["obs_dim"]))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
