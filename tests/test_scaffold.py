"""`flbridge scaffold`: a starter spec from a header.  On the shipped
runtimes it recovers the roles and most ops their specs list (with the
right C function); its output passes the validator, or says what is left."""
from pathlib import Path

import pytest

import flbridge
from flbridge.cli import main, validate
from flbridge.specs import load_spec
from flbridge.binding import plan_call
from flbridge.binding.header import load_header
from flbridge.tools.scaffold_header import tokens, vendor_prefix
from flbridge.tools.scaffold import scaffold

ROOT = Path(__file__).resolve().parents[1]
CHIPS = {"x1": "libx1sim.so", "th1": "libth1sim.so"}


@pytest.fixture(scope="module", params=sorted(CHIPS))
def scaffolded(request):
    chip = request.param
    s = scaffold(ROOT / "native_sim" / chip / f"{chip}_runtime.h", ROOT / "native_sim" / "build" / CHIPS[chip],
                 f"xpu:s{chip}")
    return chip, s, load_spec(ROOT / "device_specs" / f"{chip}.yaml", static=True)


def _roles(entry, fn, header, spec):
    """What each C parameter receives (aten argument, constant, result), as
    flbridge's binder plans the call."""
    plan = plan_call(entry, fn, {spec.runtime.tensor.type}, {t for t in header.typedefs if t in header.enums})
    return plan.steps, plan.out_params


def test_recovers_most_ops_of_the_shipped_spec_with_the_right_function_and_roles(scaffolded, tmp_path):
    """>= 80% of every op the shipped spec lists, all of them counted: the
    same C function and every C parameter bound to the same aten argument,
    constant or result (docs/vendor-guide.md has the figures)."""
    chip, s, spec = scaffolded
    p = tmp_path / f"s{chip}.yaml"
    p.write_text(s.text)
    got = load_spec(p, static=True).ops
    header = load_header(ROOT / "native_sim" / chip / f"{chip}_runtime.h")
    same_fn = [op for op, e in spec.ops.items() if op in got and got[op].impl == e.impl]
    right = [op for op in same_fn
             if _roles(got[op], header.functions[got[op].impl], header, spec)
             == _roles(spec.ops[op], header.functions[got[op].impl], header, spec)]
    assert len(right) >= 0.8 * len(spec.ops), (len(right), len(spec.ops),
                                                sorted(str(op) for op in set(spec.ops) - set(right)))
    # a confident guess naming another function for a listed op is wrong
    wrong = {str(op): (g.fn, spec.ops[op].impl) for g in s.ops if g.score >= 0.6 for op in
             [o for o in spec.ops if spec.ops[o].qualname in g.qualnames] if g.fn != spec.ops[op].impl}
    assert not wrong


def test_every_function_it_cannot_place_is_listed_with_why(scaffolded):
    """The spec's ops the scaffold misses: their function is either placed
    for other ops (a function serving several, which its name cannot say) or
    listed as not placed, with the reason, in the output."""
    chip, s, spec = scaffolded
    placed = {g.fn for g in s.ops}
    got = {q: g.fn for g in s.ops for q in g.qualnames}
    missed = {e.impl for e in spec.ops.values() if got.get(e.qualname) != e.impl}
    assert missed - placed <= set(s.unplaced), sorted(missed - placed - set(s.unplaced))
    for fn, why in s.unplaced.items():
        assert why, fn
        assert f"#   {fn}(" in s.text and f"#     not placed: {why}" in s.text


def test_finds_every_runtime_role_the_shipped_spec_uses(scaffolded):
    chip, s, spec = scaffolded
    assert {r: g.fn for r, g in s.roles.items()} == {r: f.fn for r, f in spec.runtime.roles.items()}
    # the arguments in C order, where the vendor's names differ from the role's
    for role, rf in spec.runtime.roles.items():
        if rf.args:
            assert s.roles[role].args == rf.args, role


def test_output_passes_the_validator(scaffolded, tmp_path, capsys):
    chip, s, spec = scaffolded
    assert s.left == []
    p = tmp_path / f"s{chip}.yaml"
    p.write_text(s.text)
    assert validate([str(p)], static=True) == 0
    assert validate([str(p)]) == 0                      # and with the library loaded
    out = capsys.readouterr().out
    assert f"ok: {p}: xpu:s{chip}" in out
    text = s.text
    assert "# high:" in text and "#   header:" in text    # each entry says how sure it is, and what the header says


def test_descriptor_struct_and_dtype_codes(scaffolded):
    chip, s, spec = scaffolded
    import yaml
    data = yaml.safe_load(s.text)
    assert data["runtime"]["tensor"] == {"type": spec.runtime.tensor.type, **spec.runtime.tensor.fields}
    want = {k.replace("torch.", ""): v for k, v in ((str(d), c) for d, c in spec.runtime.dtype_codes.items())}
    assert data["runtime"]["dtypes"] == want


def test_a_header_with_pieces_missing_lists_what_is_left(tmp_path, capsys):
    hdr = tmp_path / "acme.h"
    hdr.write_text("""
typedef enum { ACME_OK = 0, ACME_EINVAL = 1, ACME_ENOMEM = 2 } acme_status;
typedef enum { ACME_F32 = 0, ACME_F16 = 1, ACME_I64 = 2 } acme_dtype;
typedef struct { unsigned long long data; int ndim; int dtype; long long shape[8]; long long strides[8]; } acme_tensor;
acme_status acme_init(void);
acme_status acme_malloc(unsigned long long *ptr, unsigned long size);
acme_status acme_free(unsigned long long ptr);
acme_status acme_h2d(unsigned long long dst, const void *src, unsigned long nbytes);
acme_status acme_d2h(void *dst, unsigned long long src, unsigned long nbytes);
/* out = self + alpha * other */
acme_status acme_add(const acme_tensor *self, const acme_tensor *other, double alpha, acme_tensor *out);
acme_status acme_matmul(const acme_tensor *a, const acme_tensor *b, acme_tensor *c);
""")
    out = tmp_path / "acme.yaml"
    rc = main(["scaffold", "--header", str(hdr), "--so", str(tmp_path / "libacme.so"), "--name", "xpu:acme",
               "--vendor", "ACME", "-o", str(out)])
    assert rc == 1                                        # something is left to fill
    text = out.read_text()
    assert "Left to fill" in text and "runtime.last_error: no function found (required)" in text
    assert 'runtime_so: libacme.so' in text and "runtime_header: acme.h" in text    # relative to the spec
    assert "memcpy_h2d: acme_h2d" in text and "malloc: {fn: acme_malloc, args: [ptr, nbytes]}" in text
    assert "- name: [aten::add.Tensor, aten::add_.Tensor]" in text and "impl: acme_add" in text
    assert "impl: acme_matmul" in text and "args: {a: self, b: mat2, c: out}" in text
    assert "  # last_error: ???   # required: no function found; name the C function" in text
    assert "things left to fill" in capsys.readouterr().err


def test_refuses_a_bad_name_and_an_unreadable_header(tmp_path):
    with pytest.raises(flbridge.FlbridgeError, match="must look like 'xpu:<name>'"):
        scaffold(tmp_path / "x.h", tmp_path / "x.so", "acme")
    with pytest.raises(flbridge.HeaderError, match="cannot read header"):
        scaffold(tmp_path / "missing.h", tmp_path / "x.so", "xpu:acme")


def test_name_words_and_vendor_prefix():
    assert tokens("th1MemcpyHtoD") == ["th1", "memcpy", "hto", "d"]
    assert tokens("x1_max_pool2d_backward") == ["x1", "max", "pool2d", "backward"]
    assert tokens("acmeReduceSum") == ["acme", "reduce", "sum"]
    assert vendor_prefix(["x1_add", "x1_mul", "custom_softmax_x1", "x1_mm"]) == "x1"
