"""Vendor headers -> cffi declarations and parameter names."""
import cffi
import pytest

from flbridge.binding.header import load_header, parse_functions, preprocess
from flbridge.errors import HeaderError

VENDOR_HEADER = r'''
/* acme_rt.h -- ACME NPU runtime v3
 * (C) ACME.  All rights reserved. */
#ifndef ACME_RT_H_
#define ACME_RT_H_

#include <stdint.h>
#include <stddef.h>

#if defined(_WIN32)
#  define ACME_EXPORT __declspec(dllexport)
#elif defined(__GNUC__) && __GNUC__ >= 4
#  define ACME_EXPORT __attribute__((visibility("default")))
#else
#  define ACME_EXPORT
#endif
#define ACME_DEPRECATED(msg) __attribute__((deprecated(msg)))
#define ACME_MAX_RANK (4 + \
                       4)
#define ACME_VERSION 0x0300u
#define ACME_NAME "acme"          /* not an integer: cffi cannot use it */

extern "C" {

typedef enum { ACME_OK = 0, ACME_EBAD = -22, ACME_ENOMEM = 12 } acme_status;
typedef struct acme_buf { uint64_t addr; int32_t rank; int32_t kind;
                          int64_t dims[ACME_MAX_RANK]; int64_t steps[ACME_MAX_RANK]; } acme_buf_t;

// Inline helpers in the header must not reach cffi.
static inline int acme_is_ok(acme_status s) { return s == ACME_OK; }

ACME_EXPORT acme_status acme_open(uint32_t flags);
ACME_EXPORT ACME_DEPRECATED("use acme_open") acme_status acme_init(void);
ACME_EXPORT acme_status acme_gemm(const acme_buf_t *restrict a, const acme_buf_t *b,
                                  float alpha, acme_buf_t *c);
ACME_EXPORT const char *acme_strerror(acme_status s);
ACME_EXPORT acme_status acme_copy(const void *const *srcs, size_t n, const int64_t *dims);
#if ACME_VERSION >= 0x0400
ACME_EXPORT acme_status acme_future(void);
#endif

}
#endif  /* ACME_RT_H_ */
'''


def test_vendor_style_header_preprocesses_for_cffi(tmp_path):
    h = tmp_path / "acme_rt.h"
    h.write_text(VENDOR_HEADER)
    hdr = load_header(h)
    assert hdr.constants["ACME_MAX_RANK"] == 8 and hdr.constants["ACME_VERSION"] == 0x300
    assert "ACME_NAME" not in hdr.constants
    assert set(hdr.functions) == {"acme_open", "acme_init", "acme_gemm", "acme_strerror", "acme_copy"}
    assert "acme_is_ok" not in hdr.functions and "acme_future" not in hdr.functions
    ffi = cffi.FFI()
    ffi.cdef(hdr.cdef)                                  # cffi accepts what is left
    assert ffi.typeof("acme_buf_t").fields[3][1].type.length == 8
    lib = ffi.dlopen(None)
    assert lib.ACME_EBAD == -22 and lib.ACME_MAX_RANK == 8


def test_parameter_names_types_and_lines(tmp_path):
    h = tmp_path / "acme_rt.h"
    h.write_text(VENDOR_HEADER)
    fns = load_header(h).functions
    g = fns["acme_gemm"]
    assert g.param_names == ["a", "b", "alpha", "c"] and g.returns == "acme_status"
    a, alpha, c = g.params[0], g.params[2], g.params[3]
    assert (a.base, a.pointer_depth, a.const_target) == ("acme_buf_t", 1, True)
    assert (alpha.ctype, alpha.pointer_depth) == ("float", 0)
    assert (c.ctype, c.const_target) == ("acme_buf_t *", False)
    assert g.line == VENDOR_HEADER.splitlines().index(
        next(l for l in VENDOR_HEADER.splitlines() if "acme_gemm(" in l)) + 1
    cp = fns["acme_copy"]
    assert cp.params[0].pointer_depth == 2 and cp.params[0].base == "void"
    assert fns["acme_init"].params == []                # f(void)
    assert fns["acme_strerror"].returns == "const char *"


def test_shipped_headers_have_named_parameters():
    from pathlib import Path
    root = Path(__file__).resolve().parents[1] / "native_sim"
    x1 = load_header(root / "x1/x1_runtime.h").functions
    assert x1["x1_conv2d"].param_names == ["input", "weight", "bias", "stride", "padding", "dilation",
                                           "groups", "out"]
    th1 = load_header(root / "th1/th1_runtime.h").functions
    assert th1["th1MemcpyHtoDBatch"].param_names == ["dstDevices", "srcHosts", "byteCounts", "numCopies"]
    assert th1["th1Softmax"].param_names == ["x", "axis", "flags", "y"]


@pytest.mark.parametrize("text,message", [
    ("#if 1\nint f(void);\n", "unterminated #if"),
    ("#endif\n", "#endif without #if"),
    ("#error unsupported compiler\n", "#error unsupported compiler"),
    ("int f(int a;\n", ""),
])
def test_header_errors_name_file_and_line(tmp_path, text, message):
    h = tmp_path / "bad.h"
    h.write_text("/* header */\n" + text)
    with pytest.raises(HeaderError) as ei:
        load_header(h)
    assert ei.value.file == str(h) and ei.value.line >= 1
    assert message in ei.value.message


def test_unnamed_parameters_are_reported_by_the_binding():
    cdef, _ = preprocess("typedef struct { int a; } t_t; int k(const t_t *, t_t *);")
    fns, _ = parse_functions(cdef)
    assert fns["k"].param_names == [None, None]


def test_enum_members_get_their_c_values_without_loading(tmp_path):
    hdr = tmp_path / "rt.h"
    hdr.write_text("#define BASE 100\n"
                   "typedef enum { A_OK = 0, A_BAD = BASE + 1, A_WORSE, A_SHIFT = 1 << 4 } a_status;\n"
                   "enum a_kind { K0, K1 = 'x', K2 };\n"
                   "a_status a_init(void);\n")
    h = load_header(hdr)
    assert h.enums["a_status"] == {"A_OK": 0, "A_BAD": 101, "A_WORSE": 102, "A_SHIFT": 16}
    assert h.enums["enum a_kind"] == {"K0": 0, "K1": 120, "K2": 121}
    assert h.constant("A_WORSE") == 102 and h.constant("BASE") == 100 and h.constant("NOPE") is None


def test_c_arithmetic_follows_c_not_python():
    from flbridge.binding import cexpr
    assert cexpr.evaluate("-7 / 2") == -3 and cexpr.evaluate("-7 % 2") == -1     # truncation toward zero
    assert cexpr.evaluate("1 ? 2 : 3") == 2 and cexpr.evaluate("!0 && (3 > 2)") == 1
    assert cexpr.evaluate("0x10u | 0b1 | 010") == 25 and cexpr.evaluate("'A'") == 65
    with pytest.raises(cexpr.CExprError, match="shift by 64"):
        cexpr.evaluate("1 << 64")
    with pytest.raises(cexpr.NotConstant):
        cexpr.evaluate("(int)4")                     # a cast names a type: not a constant


def test_if_with_unbounded_arithmetic_is_an_error_at_its_line():
    text = "#if (1 << 99999999999)\nint f(void);\n#endif\n"
    with pytest.raises(HeaderError) as ei:
        preprocess(text, "x.h")
    assert ei.value.line == 1 and "shift by 99999999999" in ei.value.message


def test_header_over_the_size_limit_is_refused(tmp_path):
    from flbridge.binding.header import MAX_HEADER_BYTES
    hdr = tmp_path / "sdk.h"
    hdr.write_bytes(b"/*" + b" " * MAX_HEADER_BYTES + b"*/\n")
    with pytest.raises(HeaderError, match="larger than 8 MiB") as ei:
        load_header(hdr)
    assert ei.value.line == 1
