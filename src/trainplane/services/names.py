"""Which project owns each registered model name and MLflow experiment
(``owned_names``; DESIGN.md "Trust boundaries", names per project).

A name belongs to the first project whose submitted job names it: the model
of ``register_model.name``, the experiment of ``tracking.experiment`` (by
default the project's own name). Submitting claims the job's names in the
transaction that inserts the job, with one INSERT .. ON CONFLICT DO NOTHING
on the name's primary key followed by a read of the owner: of two projects
submitting at once, the second waits for the first to commit and then reads
that project as the owner, so both cannot win.

An experiment named like another existing project is that project's default
experiment: it is refused even before that project has used it, so creating
a project never leaves it without a place to write its runs. (A project that
already owns such an experiment keeps it.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from trainplane.db.access_models import OwnedName
from trainplane.db.base import upsert_insert, utcnow
from trainplane.db.models import Project
from trainplane.errors import ConflictError, InvalidInputError
from trainplane.tracking.run_data import experiment_name

MODEL = "model"
EXPERIMENT = "experiment"
FIELDS = {MODEL: "register_model.name", EXPERIMENT: "tracking.experiment"}


@dataclass(frozen=True)
class NameUse:
    kind: str  # MODEL or EXPERIMENT
    name: str

    @property
    def field(self) -> str:
        return FIELDS[self.kind]


def names_of(spec: Mapping[str, Any], project: str) -> list[NameUse]:
    """The names a job (its stored spec document) writes to."""
    uses = [NameUse(EXPERIMENT, experiment_name(spec, project))]
    model = (spec.get("register_model") or {}).get("name")
    if model:
        uses.append(NameUse(MODEL, model))
    return uses


def refusal(use: NameUse, project: str) -> str:
    """Why a job of ``project`` may not use a name another project owns. The
    owner is not named: the caller may not even see that project."""
    if use.kind == MODEL:
        return (
            f"model '{use.name}' belongs to another project; a job of project {project} "
            "may not add versions to it or move its aliases: pick another name"
        )
    return (
        f"MLflow experiment '{use.name}' belongs to another project; pick another "
        f"experiment (by default a job writes to its project's own, '{project}')"
    )


def owners(session: Session, uses: Iterable[NameUse]) -> dict[NameUse, tuple[str, str]]:
    """The owning project (id, name) of each of ``uses`` that has one."""
    wanted = {(u.kind, u.name) for u in uses}
    if not wanted:
        return {}
    rows = session.execute(
        select(OwnedName.kind, OwnedName.name, Project.id, Project.name)
        .join(Project, Project.id == OwnedName.project_id)
        .where(tuple_(OwnedName.kind, OwnedName.name).in_(sorted(wanted)))
    )
    return {NameUse(kind, name): (pid, pname) for kind, name, pid, pname in rows}


def owner_ids(session: Session, uses: Iterable[NameUse]) -> dict[NameUse, str]:
    """The project each of ``uses`` belongs to, if any: its owner, or for an
    experiment no one owns, the project of that name (whose default it is)."""
    uses = set(uses)
    found = {use: owner[0] for use, owner in owners(session, uses).items()}
    unowned = {u.name for u in uses if u.kind == EXPERIMENT and u not in found}
    if unowned:
        rows = session.execute(select(Project.name, Project.id).where(Project.name.in_(unowned)))
        found.update({NameUse(EXPERIMENT, name): project_id for name, project_id in rows})
    return found


def _project_named(session: Session, name: str) -> str | None:
    return session.scalar(select(Project.id).where(Project.name == name))


def check_names(
    session: Session, project_id: str, project: str, spec: Mapping[str, Any], *, claim: bool
) -> None:
    """Refuse (422 on the field) a spec that names a model or experiment of
    another project; with ``claim``, the spec's project takes the names no
    one owns yet. Call it inside the transaction that inserts the job."""
    uses = names_of(spec, project)
    owned = owners(session, uses)
    for use in uses:
        if use.kind == EXPERIMENT and use.name != project and use not in owned:
            other = _project_named(session, use.name)
            if other is not None and other != project_id:
                raise InvalidInputError(use.field, refusal(use, project))
    if claim:
        for use in uses:
            session.execute(
                upsert_insert(session, OwnedName)
                .values(kind=use.kind, name=use.name, project_id=project_id, created_at=utcnow())
                .on_conflict_do_nothing(index_elements=[OwnedName.kind, OwnedName.name])
            )
        # A fresh statement after the inserts: under READ COMMITTED it sees
        # the row of whichever transaction won, ours or a concurrent one's.
        owned = owners(session, uses)
    for use in uses:
        owner = owned.get(use)
        if owner is not None and owner[0] != project_id:
            raise InvalidInputError(use.field, refusal(use, project))


def check_default_experiment_free(session: Session, project: str) -> None:
    """A new project's default experiment is its name: refuse the name while
    another project owns that experiment, or the new project could never
    write its runs where they go by default."""
    owner = owners(session, [NameUse(EXPERIMENT, project)]).get(NameUse(EXPERIMENT, project))
    if owner is not None:
        raise ConflictError(
            f"MLflow experiment '{project}' already belongs to project {owner[1]}, and a "
            f"project's runs go to the experiment of its name: choose another project name"
        )


def claim_name(session: Session, use: NameUse, project_id: str) -> str:
    """Claim ``use`` for the project if no one owns it; the owner's id after.
    For the tracking loop, on names that predate ownership (its own transaction)."""
    with session.begin():
        session.execute(
            upsert_insert(session, OwnedName)
            .values(kind=use.kind, name=use.name, project_id=project_id, created_at=utcnow())
            .on_conflict_do_nothing(index_elements=[OwnedName.kind, OwnedName.name])
        )
        return session.scalars(
            select(OwnedName.project_id).where(
                OwnedName.kind == use.kind, OwnedName.name == use.name
            )
        ).one()
