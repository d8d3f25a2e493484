"""docs/configuration.md is what the generator writes from the config classes."""

from pathlib import Path

from llm_assets.assets.config_reference import COMMAND, PAGE, render, rows, type_name
from llm_assets.definitions import defs
from llm_assets.kernels.filters.registry import plugins

REPO = Path(__file__).resolve().parents[2]


def test_the_configuration_page_is_up_to_date():
    page = REPO / "docs" / "configuration.md"
    assert page == PAGE
    assert page.read_text(encoding="utf-8") == render(), (
        f"docs/configuration.md is stale: run `{COMMAND}` and commit the page"
    )


def test_every_run_config_key_of_the_pipeline_is_on_the_page():
    """Each leaf key of every step and resource, dotted, with its type and default; an installed
    filter plugin's keys are left to its own package."""
    page = render()
    schema = defs.resolve_job_def("llm_pipeline").run_config_schema.config_type
    for section in ("ops", "resources"):
        for name, node in schema.fields[section].config_type.fields.items():
            config = node.config_type.fields.get("config")
            if name == "io_manager" or config is None:
                continue
            assert f"`{section}.{name}.config`" in page
            plugin_keys = frozenset(cls.config_key for cls in plugins())
            skip = plugin_keys if name == "filtered_documents" else frozenset()
            for key, kind, default, _ in rows(config.config_type, skip=skip):
                assert f"| `{key}` |" in page, (name, key)
                assert default or kind == "mapping", (name, key)
    assert "| `quality.min_words` | int | `50` |" in page
    assert "| `seq_len` | int | `1024` |" in page


def test_type_names_read_as_words():
    schema = defs.resolve_job_def("llm_pipeline").run_config_schema.config_type
    batches = schema.fields["ops"].config_type.fields["training_batches"]
    layout = batches.config_type.fields["config"].config_type.fields["layout"].config_type
    assert type_name(layout) == "one of: `packed`, `padded`, `bucketed`"
    max_copies = batches.config_type.fields["config"].config_type.fields["max_copies"].config_type
    assert type_name(max_copies) == "int or null"
