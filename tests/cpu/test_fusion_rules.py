"""The CPU backend's one fusion stage (backends/cpu/fusion/__init__.py): its ordered table of rules, one taken set
(no instruction in two groups), one stub kernel for what a group absorbs; and adding a fusion takes the three
places its recipe names (backends/cpu/README.md, "Adding a fusion"), made here at run time as they would be made
in the files: a rule (a module of fusion/ and its line in RULES), a template (templates/), one conformance line
(conformance/tier_models.py). The toy rule runs add then neg as one loop, -(a + b); the suite's case for it runs
on the cpu backend (the real C compiler) against the interpreter, and a wrong template is caught."""
from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter

import numpy as np
import pytest
from onnx import TensorProto, helper

import glow_conformance
import glow_core
from glow_conformance import example_models, tier_models
from glow_conformance.plugin import use_backend_sizes
from glow_core.fusion import FUSED_ACTIVATION
from glow_core.plan_queries import overlap, same_bytes
from glow_cpu import fusion, templates
from glow_cpu.backend import CPUBackend
from glow_cpu.kernels.codegen import KernelCode

needs_cc = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler")


def test_rules_in_order_each_with_its_option():
    assert [r.name for r in fusion.RULES] == ["broadcasts", "attention", "residual", "chains", "transposes"]
    assert {r.name: r.option for r in fusion.RULES if r.option} == {"chains": "elementwise_chains",
                                                                    "transposes": "transpose_folding"}


@needs_cc
@pytest.mark.parametrize("name, threads", [("bert", 2), ("resnet", 1)])
def test_one_taken_set_and_one_stub(name, threads):
    """Each instruction is in at most one group, every absorbed one runs the one stub kernel with the listing of
    where it is computed, and a group's kernel runs at its ``at`` instruction."""
    model = (example_models.bert_encoder(seed=1, seq=32, hidden=32, heads=2, ffn=64, layers=1) if name == "bert"
             else example_models.resnet(seed=1, size=16, widths=(8, 16), blocks=1))
    cm = glow_core.compile(model, "cpu", num_threads=threads)
    x = {i.name: np.random.default_rng(0).standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
         .astype(np.float32) for i in model.graph.input}
    cm.run(x)
    program = cm.last.compiled.program
    groups = {id(g): g for g in program.fused.groups.values()}.values()
    members = Counter(id(m) for g in groups for m in g.members)
    assert members and max(members.values()) == 1
    assert {g.rule for g in groups} >= ({"broadcasts", "chains"} if name == "bert" else {"residual"})
    by_instr = {id(c.instr): c for c in program.calls}
    for g in groups:
        for m in g.members:
            if m is not g.at:
                call = by_instr[id(m)]
                assert call.code.name == fusion.STUB.name and call.code.choice == g.listing(m) and not call.ptrs
    stubs = [k for k in program.kernels.values() if k.source.startswith(f"GLOW_KERNEL int {fusion.STUB.name}(")]
    assert len(stubs) == 1


# -- the recipe, at run time ----------------------------------------------------------------------------------
#: 2. the template (templates/neg_add.c.j2)
NEG_ADD_C = """GLOW_KERNEL int {{ fn }}(uint8_t *const *p) {
  float *z = (float *)(p[0]);
  const float *a = (const float *)(p[1]), *b = (const float *)(p[2]);
  for (int64_t i = 0; i < {{ n }}; ++i) z[i] = -(a[i] + b[i]);
  return 0;
}
"""


def neg_add_match(fused, add):
    """1. the rule (fusion/neg_add.py): a float32 add whose only reader is the neg right after it."""
    if add.op != "add" or id(add) in fused.taken or add.attrs.get(FUSED_ACTIVATION):
        return None
    (y,), (a, b) = add.outs, add.ins
    index = fused.index
    if y.type.dtype.name != "float32" or y.kind != "activation" or y.base is not None or id(y) in index.viewed \
            or a.type.shape != y.type.shape or b.type.shape != y.type.shape or id(add) in fused.sources:
        return None
    readers = index.readers(y, index.position(add))
    if not readers or len(readers) != 1 or readers[0][0].op != "neg" or readers[0][0].attrs.get(FUSED_ACTIVATION):
        return None
    neg = readers[0][0]
    (z,) = neg.outs
    if index.next_kernel(index.position(add)) != index.position(neg) or z.type != y.type:
        return None
    if any(overlap(z, x) and not same_bytes(z, x) for x in (a, b)):  # element for element in place, or apart
        return None
    return fusion.Group("neg_add", [add, neg], neg, "computed in the neg_add loop of the neg after it", [z, a, b],
                        data=(z, a, b))


def neg_add_kernel(group, fused):
    z, a, b = group.data
    src = templates.template("neg_add.c.j2").render(fn="GLOW_KERNEL_NAME", n=z.type.numel)
    name = "glow_k_" + hashlib.sha1(src.encode()).hexdigest()[:20]
    return group.at, KernelCode(name, src.replace("GLOW_KERNEL_NAME", name), (), (), "neg_add: -(a + b), one loop"), \
        [z, a, b]


def neg_add_model(dt="float32"):
    g = helper.make_graph(
        [helper.make_node("Mul", ["x", "y"], ["m"]), helper.make_node("Add", ["m", "y"], ["s"]),
         helper.make_node("Neg", ["s"], ["out"])], "neg_add",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3, 41]) for n in ("x", "y")],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [3, 41])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.fixture
def neg_add(tmp_path, monkeypatch):
    """The three places, removed again afterwards: the rule in RULES (before chains, which would take the pair
    otherwise), the template in (a copy of) templates/, the conformance line."""
    folder = tmp_path / "templates"
    shutil.copytree(templates.FOLDER, folder)
    (folder / "neg_add.c.j2").write_text(NEG_ADD_C)                                          # 2. template
    monkeypatch.setattr(templates, "FOLDER", str(folder))
    monkeypatch.setattr(templates, "_ENV", None)
    rule = fusion.Rule("neg_add", neg_add_match, neg_add_kernel)                             # 1. rule
    at = [r.name for r in fusion.RULES].index("chains")
    monkeypatch.setattr(fusion, "RULES", fusion.RULES[:at] + (rule,) + fusion.RULES[at:])
    monkeypatch.setitem(fusion.RULE, "neg_add", rule)
    use_backend_sizes(CPUBackend())  # the tables as the run will have them, so the line added stays
    monkeypatch.setitem(tier_models.MODELS, "neg_add", neg_add_model)                        # 3. one case line
    yield folder


def run_suite(tmp_path):
    report = tmp_path / "r.html"
    rc = glow_conformance.main(["--backend", "cpu", "-q", "-p", "no:randomly", "--case", "models/neg_add/*",
                                "--conformance-report", str(report)])
    with open(tmp_path / "r.json") as f:
        return rc, json.load(f)


@needs_cc
def test_a_fusion_added_in_three_places_runs_and_passes_its_case(neg_add, tmp_path):
    cm = glow_core.compile(neg_add_model(), "cpu", num_threads=1)
    x, y = (np.random.default_rng(i).standard_normal((3, 41)).astype(np.float32) for i in (1, 2))
    got = cm.run({"x": x, "y": y})["out"]
    assert np.array_equal(got, -(x * y + y))
    choices = [c.code.choice for c in cm.last.compiled.program.calls]
    assert "neg_add: -(a + b), one loop" in choices and "computed in the neg_add loop of the neg after it" in choices
    rc, data = run_suite(tmp_path)
    assert rc == 0 and [c["outcome"] for c in data["cases"]] == ["pass"], data["counts"]


@needs_cc
def test_a_wrong_fusion_template_is_caught(neg_add, tmp_path):
    (neg_add / "neg_add.c.j2").write_text(NEG_ADD_C.replace("-(a[i] + b[i])", "-(a[i] - b[i])"))
    rc, data = run_suite(tmp_path)
    assert rc == 1 and [c["outcome"] for c in data["cases"]] == ["fail"], data["counts"]
