"""Each checkpoint format written by its own library, graded as a careful engineer would.

Tiny models built from configs (nothing downloaded: HF_HUB_OFFLINE=1), real libraries
(transformers, peft, accelerate, lightning, safetensors, torch.distributed.checkpoint).
"""

from __future__ import annotations

import json
import os
import textwrap

import pytest
import torch

from runner.grading.checkpoint_grade import grade_path
from runner.grading.client import verify_many

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _tiny_gpt2():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(
        n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=32, bos_token_id=0, eos_token_id=0
    )
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(cfg)


def test_hf_trainer_folder_with_numpy_rng_state_verifies_full(tmp_path):
    transformers = pytest.importorskip("transformers")
    model = _tiny_gpt2()
    data = [{"input_ids": torch.randint(0, 64, (8,)), "labels": torch.randint(0, 64, (8,))} for _ in range(8)]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        save_steps=2,
        per_device_train_batch_size=4,
        report_to=[],
        use_cpu=True,
        logging_steps=1,
    )
    transformers.Trainer(model=model, args=args, train_dataset=data).train()
    folder = tmp_path / "out" / "checkpoint-2"
    assert (folder / "rng_state.pth").exists()
    res = grade_path(folder)
    assert res["format"] == "hf-trainer" and res["step"] == 2, res
    assert res["verified"] and res["grade"] == "full", res["problems"]
    assert not any("random-number" in p for p in res["problems"])  # NumPy state allowed by name, not unpickled
    (folder / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes()[:-100])
    assert grade_path(folder)["verified"] is False


def test_safetensors_by_content_nan_and_new_dtypes(tmp_path):
    st = pytest.importorskip("safetensors.torch")
    good = {
        "w": torch.ones(3, 3),
        "c": torch.ones(2, dtype=torch.complex64),
        "e": torch.ones(4).to(torch.float8_e8m0fnu),
    }
    st.save_file(good, tmp_path / "model.safetensors")
    (tmp_path / "copy.candidate").write_bytes((tmp_path / "model.safetensors").read_bytes())
    for name in ("model.safetensors", "copy.candidate"):  # graded by content, not by suffix
        res = grade_path(tmp_path / name)
        assert res["format"] == "safetensors" and res["verified"] and res["grade"] == "weights", res
    st.save_file({"w": torch.tensor([1.0, float("nan")])}, tmp_path / "nan.safetensors")
    res = grade_path(tmp_path / "nan.safetensors")
    assert res["verified"] is False and any("non-finite" in p for p in res["problems"])


def test_sharded_safetensors_missing_shard_and_missing_tensor(tmp_path):
    model = _tiny_gpt2()
    model.save_pretrained(tmp_path / "m", max_shard_size="4KB")
    index = tmp_path / "m" / "model.safetensors.index.json"
    assert index.exists()
    assert grade_path(tmp_path / "m")["verified"] is True
    assert grade_path(index)["format"] == "safetensors-sharded"
    weight_map = json.loads(index.read_text())["weight_map"]
    shard = sorted(set(weight_map.values()))[-1]
    data = json.loads(index.read_text())
    data["weight_map"]["not.a.tensor"] = shard
    index.write_text(json.dumps(data))
    res = grade_path(tmp_path / "m")
    assert res["verified"] is False and any("lacks 1 tensor" in p for p in res["problems"]), res
    (tmp_path / "m" / shard).unlink()
    res = grade_path(tmp_path / "m")
    assert res["verified"] is False and any("missing" in p for p in res["problems"]), res


def test_peft_adapter_records_base_revision(tmp_path):
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(_tiny_gpt2(), peft.LoraConfig(r=2, target_modules=["c_attn"], revision="abc123"))
    model.save_pretrained(tmp_path / "adapter")
    res = grade_path(tmp_path / "adapter")
    assert res["format"] == "peft-adapter" and res["verified"] and res["base_revision"] == "abc123", res


def test_accelerate_save_state_folder(tmp_path):
    accelerate = pytest.importorskip("accelerate")
    acc = accelerate.Accelerator(cpu=True)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.AdamW(model.parameters())
    model, opt = acc.prepare(model, opt)
    model(torch.ones(1, 4)).sum().backward()
    opt.step()
    acc.save_state(str(tmp_path / "state"))
    res = grade_path(tmp_path / "state")
    assert res["format"] == "accelerate" and res["verified"], res
    assert {"model", "optimizer", "rng"} <= set(res["holds"]), res


def test_lightning_ckpt_has_no_data_position(tmp_path):
    L = pytest.importorskip("lightning")

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, _):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(16, 4)), batch_size=4)
    trainer = L.Trainer(
        max_steps=3, default_root_dir=tmp_path, logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    trainer.fit(Tiny(), loader)
    ckpt = next((tmp_path / "checkpoints").glob("*.ckpt"))
    res = grade_path(ckpt)
    assert res["format"] == "lightning" and res["verified"] and res["step"] == 3, res
    assert "data" not in res["holds"] and res["grade"] == "weights+optimizer"


def test_dcp_folder_and_missing_file(tmp_path):
    import torch.distributed.checkpoint as dcp

    model = torch.nn.Linear(4, 2)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 4)).sum().backward()
    opt.step()
    state = {"model": model.state_dict(), "optim": opt.state_dict()}
    dcp.save(state, checkpoint_id=str(tmp_path / "dcp"), no_dist=True)
    res = grade_path(tmp_path / "dcp")
    assert res["format"] == "torch-dcp" and res["verified"] and {"model", "optimizer"} <= set(res["holds"]), res
    for f in (tmp_path / "dcp").glob("*.distcp"):
        f.unlink()
    res = grade_path(tmp_path / "dcp")
    assert res["verified"] is False and any("missing" in p for p in res["problems"]), res


def test_deepspeed_zero3_placeholders_are_not_weights(tmp_path):
    folder = tmp_path / "ds" / "global_step5"
    folder.mkdir(parents=True)
    (tmp_path / "ds" / "latest").write_text("global_step5")
    placeholder = {"w": torch.empty(0), "b": torch.empty(0)}
    torch.save(
        {"module": placeholder, "param_shapes": [{"w": [4, 4], "b": [4]}], "global_steps": 5, "dp_world_size": 2},
        folder / "mp_rank_00_model_states.pt",
    )
    res = grade_path(folder / "mp_rank_00_model_states.pt")
    assert res["format"] == "deepspeed" and res["verified"] is False
    assert any("placeholder" in p for p in res["problems"]), res
    torch.save(
        {"optimizer_state_dict": {"fp32_flat_groups": [torch.ones(10)]}},
        folder / "zero_pp_rank_0_mp_rank_00_optim_states.pt",
    )
    res = grade_path(tmp_path / "ds")
    assert res["verified"] is False and any("1 of 2 ZeRO partition" in p for p in res["problems"]), res


def test_pickled_module_is_named_with_the_fix_and_trusted_on_opt_in(tmp_path, monkeypatch):
    (tmp_path / "netdef.py").write_text(
        textwrap.dedent(
            """
            import torch
            class Net(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = torch.nn.Linear(3, 3)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import netdef

    torch.save(netdef.Net(), tmp_path / "model.pt")
    plain, trusted = verify_many([tmp_path / "model.pt"], cwd=tmp_path)[0], None
    assert plain["format"] == "pickled-module" and plain["verified"] is False
    assert any("model.state_dict()" in p and "trust_pickled_module" in p for p in plain["problems"]), plain
    trusted = verify_many([tmp_path / "model.pt"], cwd=tmp_path, trust_pickled_module=True)[0]
    assert trusted["verified"] is True and trusted["grade"] == "weights", trusted
