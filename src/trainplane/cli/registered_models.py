"""``models list``: the models jobs registered in MLflow."""

from __future__ import annotations

from typing import Annotated

import typer

from trainplane.cli.common import State, pages, say
from trainplane.cli.output import JsonFlag, OutputChoice, OutputOption, emit, print_models

models_app = typer.Typer(no_args_is_help=True, help="Models registered by jobs.")


@models_app.command("list")
def models_list(
    limit: Annotated[int, typer.Option(min=1, max=200, help="Models per page.")] = 50,
    all_pages: Annotated[bool, typer.Option("--all", help="Fetch every page.")] = False,
    output: OutputOption = None,
    as_json: JsonFlag = False,
) -> None:
    """List registered models and their versions, with the job behind each."""
    fetched = list(pages(State.client(), "/v1/models", {"limit": limit}, all_pages=all_pages))
    items = [model for page in fetched for model in page["items"]]
    cursor = fetched[-1]["next_cursor"]
    error = next((page["mlflow_error"] for page in fetched if page["mlflow_error"]), None)
    fmt = OutputChoice.of(output, as_json)
    emit(items, fmt, print_models)
    if fmt == "table" and cursor:
        say("more models: use --all")
    if error:
        say(f"MLflow did not answer, so aliases are missing: {error}")
