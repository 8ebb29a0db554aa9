"""The krew manifest of the plugin: `deploy/krew/dflash.yaml` is a template; the release fills
its version, URL and sha256 with `python -m dflash_dev.krew_manifest --version X --url U
--sha256-of dist/kubectl-dflash.tar.gz`. `manifest_problems` checks the shape krew needs.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from .paths import REPO_ROOT
from .plugin_zipapp import TARBALL_NAME, ZIPAPP_NAME

TEMPLATE = REPO_ROOT / "deploy" / "krew" / "dflash.yaml"
DEFAULT_OUTPUT = REPO_ROOT / "dist" / "dflash.yaml"
API_VERSION = "krew.googlecontainertools.github.com/v1alpha2"
PLUGIN_NAME = "dflash"
PLACEHOLDERS = {"version": "{{VERSION}}", "uri": "{{URI}}", "sha256": "{{SHA256}}"}
# krew requires a semantic version with a leading v.
SEMVER = re.compile(r"^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
# The platforms the zipapp carries pydantic-core for (krew's os/arch names).
PLATFORMS = {("linux", "amd64"), ("linux", "arm64"), ("darwin", "amd64"), ("darwin", "arm64")}
REQUIRED_SPEC_FIELDS = ("version", "homepage", "shortDescription", "description", "platforms")


class ManifestError(ValueError):
    pass


def _selected(selector: dict[str, Any], os_name: str, arch: str) -> bool:
    """Whether a krew platform selector (matchLabels / matchExpressions) picks os/arch."""
    labels = {"os": os_name, "arch": arch}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        value, values = labels.get(expression.get("key")), expression.get("values") or []
        operator = expression.get("operator")
        if (operator == "In" and value not in values) or (operator == "NotIn" and value in values):
            return False
        if operator not in ("In", "NotIn"):
            return False
    return True


def _platform_problems(index: int, platform: dict[str, Any], filled: bool) -> list[str]:
    where = f"spec.platforms[{index}]"
    problems = []
    if not platform.get("selector"):
        problems.append(f"{where}.selector is missing")
    if platform.get("bin") != ZIPAPP_NAME:
        problems.append(f"{where}.bin is {platform.get('bin')!r}, not {ZIPAPP_NAME!r}")
    sources = {entry.get("from") for entry in platform.get("files") or []}
    for needed in (ZIPAPP_NAME, "LICENSE"):
        if needed not in sources:
            problems.append(f"{where}.files does not copy {needed} from the archive")
    uri, sha = str(platform.get("uri", "")), str(platform.get("sha256", ""))
    if filled:
        if not uri.startswith("https://"):
            problems.append(f"{where}.uri {uri!r} is not an https:// URL")
        if not SHA256.match(sha):
            problems.append(f"{where}.sha256 {sha!r} is not 64 lowercase hex digits")
    else:
        if uri != PLACEHOLDERS["uri"]:
            problems.append(f"{where}.uri is {uri!r}, not the placeholder {PLACEHOLDERS['uri']}")
        if sha != PLACEHOLDERS["sha256"]:
            problems.append(f"{where}.sha256 is {sha!r}, not {PLACEHOLDERS['sha256']}")
    return problems


def manifest_problems(manifest: Any, filled: bool) -> list[str]:
    """What keeps `manifest` from being a krew Plugin of kubectl-dflash (empty: none).
    filled=False checks the template (placeholders in place), True a release's manifest."""
    if not isinstance(manifest, dict):
        return ["the manifest is not a YAML mapping"]
    problems = []
    if manifest.get("apiVersion") != API_VERSION:
        problems.append(f"apiVersion is {manifest.get('apiVersion')!r}, not {API_VERSION}")
    if manifest.get("kind") != "Plugin":
        problems.append(f"kind is {manifest.get('kind')!r}, not Plugin")
    if (manifest.get("metadata") or {}).get("name") != PLUGIN_NAME:
        problems.append(
            f"metadata.name is not {PLUGIN_NAME!r} (the plugin is kubectl {PLUGIN_NAME})"
        )
    spec = manifest.get("spec") or {}
    problems += [
        f"spec.{field} is missing" for field in REQUIRED_SPEC_FIELDS if not spec.get(field)
    ]
    version = str(spec.get("version", ""))
    if filled and not SEMVER.match(version):
        problems.append(f"spec.version {version!r} is not a version like v1.2.3")
    if not filled and version != PLACEHOLDERS["version"]:
        problems.append(f"spec.version is {version!r}, not {PLACEHOLDERS['version']}")
    platforms = spec.get("platforms") or []
    for index, platform in enumerate(platforms):
        problems += _platform_problems(index, platform, filled)
    for os_name, arch in sorted(PLATFORMS):
        chosen = [p for p in platforms if _selected(p.get("selector") or {}, os_name, arch)]
        if len(chosen) != 1:
            problems.append(f"{len(chosen)} platforms select os={os_name} arch={arch}, not 1")
    return problems


def normalize_version(version: str) -> str:
    """'1.2.3' -> 'v1.2.3' (krew's form); anything else that is not a version is refused."""
    candidate = version if version.startswith("v") else f"v{version}"
    if not SEMVER.match(candidate):
        raise ManifestError(f"--version {version!r} is not a version like v1.2.3 or 1.2.3-rc.1")
    return candidate


def fill(template: str, version: str, url: str, sha256: str) -> str:
    """The template with its placeholders replaced, checked before it is returned."""
    if not url.startswith("https://"):
        raise ManifestError(f"--url {url!r} is not an https:// URL (krew downloads over https)")
    values = {"version": normalize_version(version), "uri": url, "sha256": sha256}
    text = template
    for key, placeholder in PLACEHOLDERS.items():
        if placeholder not in text:
            raise ManifestError(f"the template has no {placeholder} placeholder")
        text = text.replace(placeholder, values[key])
    problems = manifest_problems(yaml.safe_load(text), filled=True)
    if problems:
        raise ManifestError("the filled manifest is not valid: " + "; ".join(problems))
    return text


def sha256_of(path: Path) -> str:
    if not path.is_file():
        raise ManifestError(f"--sha256-of {path}: no such file (build it with make plugin)")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dflash_dev.krew_manifest",
        description="Write the krew manifest of a release from deploy/krew/dflash.yaml.",
    )
    parser.add_argument("--version", required=True, help="release version, e.g. v1.2.3")
    parser.add_argument("--url", required=True, help=f"https URL of the release's {TARBALL_NAME}")
    parser.add_argument(
        "--sha256-of", required=True, type=Path, help=f"the {TARBALL_NAME} uploaded at --url"
    )
    parser.add_argument(
        "--output", default=str(DEFAULT_OUTPUT), help="where to write it; - for stdout"
    )
    parser.add_argument("--template", type=Path, default=TEMPLATE, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        text = fill(args.template.read_text(), args.version, args.url, sha256_of(args.sha256_of))
    except ManifestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.output == "-":
        sys.stdout.write(text)
    else:
        output = Path(args.output)
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
        print(f"wrote {output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
