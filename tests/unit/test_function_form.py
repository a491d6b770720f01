"""apply_per_key tells the forms of a per-key function apart as applyInPandas does."""

from collections.abc import Iterator

import pandas as pd
import pyarrow as pa

from orchestration.shuffle.spark.perkey import function_form


def plain(pdf):
    return pdf


def keyed(key, pdf):
    return pdf


def hinted(pdf: pd.DataFrame) -> pd.DataFrame:
    return pdf


def streamed(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    yield from batches


def keyed_streamed(key: tuple, batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    yield from batches


def half_hinted(key, batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    yield from batches


def arrow_streamed(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield from batches


def test_forms_follow_the_argument_count_anditerator_hints():
    assert function_form(plain, "pandas") == (False, False)
    assert function_form(keyed, "pandas") == (True, False)
    assert function_form(hinted, "pandas") == (False, False)
    assert function_form(streamed, "pandas") == (False, True)
    assert function_form(keyed_streamed, "pandas") == (True, True)
    assert function_form(arrow_streamed, "arrow") == (False, True)
    # Spark reads hints only when every parameter has one; else the plain form, with a key.
    assert function_form(half_hinted, "pandas") == (True, False)
    # A lambda has no hints: the plain form, as in Spark.
    assert function_form(lambda pdf: pdf, "pandas") == (False, False)


def test_per_batch_refuses_the_key_and_iterator_forms_before_reading():
    import pytest

    from orchestration.shuffle import apply_per_key
    from orchestration.shuffle.errors import ShuffleOptionError

    # Refused from the function alone: the DataFrame is never looked at.
    for fn in (keyed, streamed):
        with pytest.raises(ShuffleOptionError, match=f"per='batch' calls {fn.__name__}"):
            apply_per_key(None, "k", fn, "k string", per="batch")


def arrow_keyed_streamed(key: tuple, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield from batches


def wrong_element(batches: Iterator[pa.RecordBatch]) -> Iterator[pd.DataFrame]:
    yield from ()


FORMS = [plain, keyed, hinted, streamed, keyed_streamed, half_hinted, arrow_streamed,
         arrow_keyed_streamed, wrong_element]  # fmt: skip


def test_the_rule_used_without_sparks_inference_agrees_with_it():
    # PySpark 4.0 has no iterator form to ask about, so the hints are read by our own rule;
    # where PySpark has its inference (4.1 on), the two agree on every form.
    import pytest
    from pyspark.sql.pandas import typehints
    from pyspark.util import PythonEvalType

    from orchestration.shuffle.spark.perkey import iterator_hints

    if not hasattr(typehints, "infer_group_pandas_eval_type_from_func"):
        pytest.skip("PySpark 4.0 has no iterator form of applyInPandas to compare with")
    for data in ("pandas", "arrow"):
        infer = getattr(typehints, f"infer_group_{data}_eval_type_from_func")
        kind = getattr(PythonEvalType, f"SQL_GROUPED_MAP_{data.upper()}_ITER_UDF")
        for fn in FORMS:
            try:
                spark = infer(fn) == kind
            except Exception:  # noqa: BLE001 - Spark refuses hints it cannot read
                spark = False
            assert iterator_hints(fn, data) == spark, (fn.__name__, data)
