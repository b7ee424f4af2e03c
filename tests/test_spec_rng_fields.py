"""The spec fields device RNG and the fused optimizers brought (rng,
runtime.rng_words, expressions in args, constraints numel / may_be_empty /
require): a mistake in any is reported at load with file, line and field."""
import pytest

import flbridge
from flbridge.binding import load_runtime
from flbridge.specs import load_spec
from tests.test_registry import X1_TEXT, line_of, spec_text, write

DROPOUT = '''  - name: aten::native_dropout
    impl: x1_native_dropout
    dtype_support: [float32, float16]
    outputs: [output, mask]
    rng: {seed: seed, offset: offset, words_per_element: "train ? 1 : 0"}   # eval mode draws nothing
'''
SGD = '''    args: {params: self, momentum_buffers: momentum_buffer_list, params_len: len(self)}
'''


def _problems(tmp_path, text):
    p = write(tmp_path, text)
    with pytest.raises(flbridge.SpecError) as ei:
        load_runtime(load_spec(p))
    return p, ei.value


def _x1(old, new):
    text = spec_text(X1_TEXT)
    assert old in text, old
    return text.replace(old, new)


def test_the_shipped_rng_entry_is_what_these_tests_edit():
    assert DROPOUT in X1_TEXT and SGD in X1_TEXT


def test_a_random_op_without_rng_is_refused_naming_the_field(tmp_path):
    p, e = _problems(tmp_path, _x1(DROPOUT, DROPOUT.replace(
        '    rng: {seed: seed, offset: offset, words_per_element: "train ? 1 : 0"}   # eval mode draws nothing\n', "")))
    assert "draws random numbers" in str(e) and "rng: {seed: seed, offset: offset}" in str(e)


def test_rng_on_an_op_that_draws_nothing(tmp_path):
    p, e = _problems(tmp_path, _x1("  - {name: aten::bmm, impl: x1_bmm,",
                                   "  - {name: aten::bmm, impl: x1_bmm, rng: {seed: a, offset: b},"))
    assert "draws no random numbers" in str(e) and "remove rng" in str(e)


def test_rng_parameters_must_exist_and_differ(tmp_path):
    _, e = _problems(tmp_path, _x1(DROPOUT, DROPOUT.replace("offset: offset,", "offset: ofset,")))
    assert "rng.offset: x1_native_dropout has no parameter 'ofset'" in str(e)
    _, e = _problems(tmp_path, _x1(DROPOUT, DROPOUT.replace("offset: offset,", "offset: seed,")))
    assert "seed and offset must be two different C parameters" in str(e)


def test_words_per_element_is_an_expression_over_the_arguments(tmp_path):
    p, e = _problems(tmp_path, _x1(DROPOUT, DROPOUT.replace('"train ? 1 : 0"', '"training ? 1 : 0"')))
    assert "'training', which is neither an argument of aten::native_dropout" in str(e)
    assert "(p, train" in str(e) or "p, train" in str(e)


def test_rng_entries_need_the_rng_words_role(tmp_path):
    p, e = _problems(tmp_path, _x1("  rng_words: x1_rng_words", "  # no rng_words"))
    assert "add runtime.rng_words" in str(e)


def test_an_expression_in_args_names_arguments_or_header_constants(tmp_path):
    p, e = _problems(tmp_path, _x1(SGD, SGD.replace("params_len: len(self)}",
                                                    "params_len: \"len(self) + X1_NO_SUCH\"}")))
    assert "'X1_NO_SUCH', which is neither an argument of aten::_fused_sgd_.default" in str(e)


def test_constraint_fields_check_their_arguments(tmp_path):
    _, e = _problems(tmp_path, _x1("      may_be_empty: {momentum_buffer_list: \"momentum == 0\"}",
                                   "      may_be_empty: {lr: \"momentum == 0\"}"))
    assert "'lr' is not a tensor list argument of aten::_fused_sgd_" in str(e)
    _, e = _problems(tmp_path, _x1("      numel: {grad_scale: 1, found_inf: 1}\n      may_be_empty",
                                   "      numel: {grad_scale: -1, found_inf: 1}\n      may_be_empty"))
    assert "must be a number of elements (0 or more)" in str(e)
    p, e = _problems(tmp_path, _x1('    constraints: {require: "from < to"}',
                                   '    constraints: {require: ""}'))
    assert "must be an expression over the arguments" in str(e)
    assert f"{p}:{line_of(p, 'require: ' + chr(34) * 2)}:" in str(e)     # reported at its line


def test_len_in_an_expression_takes_a_tensor_list(tmp_path):
    _, e = _problems(tmp_path, _x1(SGD, SGD.replace("params_len: len(self)}", "params_len: \"len(lr) + 0\"}")))
    assert "len() takes a tensor list argument of aten::_fused_sgd_.default, not 'lr'" in str(e)
