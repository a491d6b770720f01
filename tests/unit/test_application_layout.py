"""The reference pipeline's own modules (``assets``, ``jobs``) form no import circle, counting
every import (in functions and under ``TYPE_CHECKING`` too): each module's dependencies can
be read from the top down, and a new circle fails here."""

from tests.unit.test_layout_rules import ROOT, assert_none, import_cycles


def test_no_import_circle_among_the_pipelines_modules():
    for top in ("assets", "jobs"):
        assert_none(import_cycles(ROOT, top, every_import=True))


def test_a_circle_between_two_asset_modules_is_found(tmp_path):
    package = tmp_path / "assets"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from assets.b import g\n")
    (package / "b.py").write_text("from assets.a import f\n\ng = f\n")
    assert import_cycles(tmp_path, "assets", every_import=True)
    assert not import_cycles(tmp_path, "assets")  # only at load: the import in f is not
