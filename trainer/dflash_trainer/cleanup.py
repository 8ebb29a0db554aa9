"""The `cleanup` stage: delete a run's artifacts as its `storage.cleanupPolicy` says.

    python -m dflash_trainer.cleanup --run-root s3://B/P/NS/RUN/UID --policy Delete|DeleteIntermediate
        [--dry-run] [--termination-log PATH]

`Delete` removes the whole run root (the operator runs it when the DFlashRun is deleted).
`DeleteIntermediate` (run after success) removes `regen/`, `tokenized/`, `model/` (the run's copy
of a Hub target) and every checkpoint
but the newest committed one, and keeps `final/` (the drafter), `audit/` and `eval/` (the
reports). Idempotent: a second run finds nothing and succeeds. The folder layout is
docs/data-contracts.md section 1; the stage result is section 5. No torch import.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from dflash_trainer.storage import (
    ObjectInfo,
    ObjectStore,
    StorageError,
    is_s3_uri,
    join_uri,
    local_path,
    split_s3_uri,
    store_for,
)
from dflash_trainer.train.result import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    build_stage_result,
    write_stage_result,
)

log = logging.getLogger("dflash_trainer.cleanup")

DELETE = "Delete"
DELETE_INTERMEDIATE = "DeleteIntermediate"
POLICIES = (DELETE, DELETE_INTERMEDIATE)
# Folders of the run root that only feed training (data contract section 1).
# model/: the run's copy of a target named by its Hub id (the model stage), fetched again on demand.
INTERMEDIATE_FOLDERS = ("regen", "tokenized", "model")
CHECKPOINTS_FOLDER = "checkpoints"
# The same layout as dflash_trainer.train.checkpoint (not imported: it needs torch).
COMMIT_FILE = "COMMITTED.json"
STEP_FOLDER = re.compile(r"^step-(\d{9})$")
# DeleteIntermediate only runs on a run whose drafter exists: the data are the way back.
DRAFTER_WEIGHTS = "final/model.safetensors"


class CleanupInputError(Exception):
    """A run root or policy the stage refuses (exit 2)."""


@dataclass
class Group:
    """One folder (or loose file) of the run root, deleted as a unit."""

    name: str  # relative to the run root, e.g. "regen/" or "checkpoints/step-000001000/"
    objects: list[ObjectInfo] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(o.size for o in self.objects)


@dataclass(frozen=True)
class CleanupPlan:
    root: str
    policy: str
    delete: list[Group]
    kept: list[str]  # top-level folders (and the checkpoint) left in place

    @property
    def objects(self) -> int:
        return sum(len(g.objects) for g in self.delete)

    @property
    def bytes(self) -> int:
        return sum(g.bytes for g in self.delete)


def check_run_root(uri: str) -> str:
    """The run root without a trailing '/'; refuses a bucket or filesystem root."""
    root = uri.rstrip("/")
    if is_s3_uri(uri):
        try:
            _bucket, key = split_s3_uri(root)
        except StorageError as exc:
            raise CleanupInputError(f"--run-root: {exc}") from None
        if not key.strip("/"):
            raise CleanupInputError(
                f"--run-root {uri!r} is a whole bucket; accepted: a run root such as "
                "s3://<bucket>/<prefix>/<namespace>/<run>/<uid>"
            )
        return root
    if uri.startswith("pvc://") or "://" in uri:
        raise CleanupInputError(
            f"--run-root {uri!r} is not accepted: use s3://<bucket>/<key> or a local folder"
        )
    if not root or local_path(root).resolve() == local_path("/").resolve():
        raise CleanupInputError(f"--run-root {uri!r} is a filesystem root; refusing to delete it")
    return root


def _relative(root: str, uri: str) -> str:
    return uri[len(root) + 1 :] if uri.startswith(root + "/") else uri


def group_objects(root: str, objects: Iterable[ObjectInfo], depth: int = 1) -> list[Group]:
    """Objects by their first `depth` path parts under `root` ("regen/", "a.json")."""
    groups: dict[str, Group] = {}
    for obj in objects:
        parts = _relative(root, obj.uri).split("/")
        name = "/".join(parts[:depth]) + "/" if len(parts) > depth else "/".join(parts)
        groups.setdefault(name, Group(name)).objects.append(obj)
    return [groups[name] for name in sorted(groups)]


def _newest_committed(checkpoints: list[Group]) -> str | None:
    committed = [
        g.name
        for g in checkpoints
        if STEP_FOLDER.match(g.name.rstrip("/").rsplit("/", 1)[-1])
        and any(o.uri.endswith("/" + COMMIT_FILE) for o in g.objects)
    ]
    return max(committed) if committed else None


def build_cleanup_plan(store: ObjectStore, root: str, policy: str) -> CleanupPlan:
    """What `policy` deletes under `root`, from one listing of it."""
    if policy not in POLICIES:
        raise CleanupInputError(f"--policy {policy!r} is not accepted; accepted: {POLICIES}")
    objects = store.list(root + "/")
    top = group_objects(root, objects)
    if policy == DELETE:
        return CleanupPlan(root, policy, top, [])
    names = {g.name for g in top}
    if objects and DRAFTER_WEIGHTS not in {_relative(root, o.uri) for o in objects}:
        raise CleanupInputError(
            f"{join_uri(root, DRAFTER_WEIGHTS)} does not exist: DeleteIntermediate only runs "
            "on a run whose drafter was exported (the intermediate data are the way back)"
        )
    delete = [g for g in top if g.name.rstrip("/") in INTERMEDIATE_FOLDERS]
    kept = sorted(
        n for n in names if n.rstrip("/") not in (*INTERMEDIATE_FOLDERS, CHECKPOINTS_FOLDER)
    )
    checkpoints_root = join_uri(root, CHECKPOINTS_FOLDER)
    checkpoints = [
        Group(f"{CHECKPOINTS_FOLDER}/{g.name}", g.objects)
        for g in group_objects(
            checkpoints_root, (o for o in objects if o.uri.startswith(checkpoints_root + "/"))
        )
    ]
    newest = _newest_committed(checkpoints)
    delete += [g for g in checkpoints if g.name != newest]
    if newest is not None:
        kept.append(newest)
    return CleanupPlan(root, policy, delete, kept)


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{n} B"


def execute_plan(store: ObjectStore, plan: CleanupPlan, dry_run: bool = False) -> int:
    """Delete every group, one progress line each; returns the objects deleted."""
    deleted = 0
    total = len(plan.delete)
    for index, group in enumerate(plan.delete, start=1):
        uri = join_uri(plan.root, group.name)
        verb = "would delete" if dry_run else "deleted"
        if not dry_run:
            if group.name.endswith("/"):
                deleted += store.delete_prefix(uri + "/")
            else:
                store.delete(uri)
                deleted += 1
        log.info(
            "cleanup %d/%d: %s %s (%d objects, %s)",
            index,
            total,
            verb,
            uri,
            len(group.objects),
            _size(group.bytes),
        )
    return deleted


def describe(plan: CleanupPlan, deleted: int, dry_run: bool) -> str:
    if not plan.delete:
        what = f"nothing to delete under {plan.root} ({plan.policy})"
    else:
        verb = "would delete" if dry_run else "deleted"
        count = plan.objects if dry_run else deleted
        what = f"{verb} {count} objects ({_size(plan.bytes)}) under {plan.root} ({plan.policy})"
    if plan.kept:
        what += "; kept " + ", ".join(plan.kept)
    return what


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m dflash_trainer.cleanup",
        description="Delete a DFlashRun's artifacts as its storage.cleanupPolicy says.",
    )
    parser.add_argument("--run-root", required=True, help="s3://bucket/prefix/ns/run/uid or path")
    parser.add_argument(
        "--policy",
        default=DELETE,
        choices=POLICIES,
        help="Delete: the whole run root; DeleteIntermediate: regen/, tokenized/, model/ and all "
        "checkpoints but the newest committed one (default: Delete)",
    )
    parser.add_argument("--dry-run", action="store_true", help="list, delete nothing")
    parser.add_argument(
        "--termination-log",
        default=None,
        help="where to write the stage result JSON (default: /dev/termination-log if it exists)",
    )
    return parser.parse_args(argv)


def _result(ok: bool, message: str, **extra: Any) -> dict[str, Any]:
    return build_stage_result("cleanup", ok, message, **extra)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s"
    )
    try:
        root = check_run_root(args.run_root)
        store = store_for(root)
        plan = build_cleanup_plan(store, root, args.policy)
        log.info(
            "cleanup of %s (%s): %d folders, %d objects, %s to delete",
            root,
            plan.policy,
            len(plan.delete),
            plan.objects,
            _size(plan.bytes),
        )
        deleted = execute_plan(store, plan, args.dry_run)
    except CleanupInputError as exc:
        log.error("%s", exc)
        write_stage_result(args.termination_log, _result(False, str(exc), policy=args.policy))
        return EXIT_BAD_INPUT
    except StorageError as exc:
        from dflash_trainer.data.errors import is_user_fixable

        log.error("cleanup of %s failed: %s", args.run_root, exc)
        write_stage_result(args.termination_log, _result(False, str(exc), policy=args.policy))
        return EXIT_BAD_INPUT if is_user_fixable(exc) else EXIT_FAILED
    message = describe(plan, deleted, args.dry_run)
    log.info("%s", message)
    write_stage_result(
        args.termination_log,
        _result(
            True,
            message,
            policy=plan.policy,
            runRoot=root,
            deletedObjects=0 if args.dry_run else deleted,
            deletedBytes=0 if args.dry_run else plan.bytes,
            dryRun=args.dry_run,
            kept=plan.kept[:32],
        ),
    )
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
