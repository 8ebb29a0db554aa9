"""`python -m dflash_dev.images build|base|run` (`make images`, `make base-images`, and a
command in an image as its user with a read-only root: `run IMAGE -- CMD...`)."""

from __future__ import annotations

import argparse
import sys

from dflash_dev.errors import DevError

from .build import DEFAULT_DEBIAN_MIRROR, IMAGES, build_base_images, build_images
from .engine import detect_engine
from .launch import run_in_image
from .regen_inputs import is_changed, write_stamp


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m dflash_dev.images", description=__doc__)
    parser.add_argument(
        "--engine", help="docker, podman or buildah (default: the first that answers)"
    )
    parser.add_argument("--proxy-ca", help="CA bundle (PEM) of a TLS-intercepting proxy")
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build the images")
    build.add_argument("images", nargs="*", default=list(IMAGES), metavar="IMAGE")
    build.add_argument("--registry", required=True)
    build.add_argument("--tag", required=True)
    base = sub.add_parser("base", help="build the stand-ins of the base images")
    base.add_argument("--debian-mirror", default=DEFAULT_DEBIAN_MIRROR)
    base.add_argument(
        "--rebuild", nargs="?", const="all", default="",
        help="also those already here (all, or a comma list of uv,python,cuda,vllm)",
    )  # fmt: skip
    base.add_argument("--python312", help="the CPython 3.12 the vLLM stand-in carries")
    base.add_argument(
        "images",
        nargs="*",
        default=list(IMAGES),
        metavar="IMAGE",
        help="build the bases these images need (default: all three)",
    )
    regen = sub.add_parser("regen-inputs", help="has the regen image's input changed? (CI)")
    regen.add_argument("--write", action="store_true", help="record them as tested")
    run = sub.add_parser("run", help="run a command in an image (read-only root, /tmp tmpfs)")
    run.add_argument("image")
    run.add_argument(
        "argv", nargs=argparse.REMAINDER, help="-- then the command (default: the image's)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "regen-inputs":
        if args.write:
            print(f"wrote {write_stamp()}")
            return 0
        changed = is_changed()
        print("the regen image's inputs " + ("changed: build it" if changed else "are unchanged"))
        return 0 if changed else 1
    try:
        engine = detect_engine(args.engine or None)
        if args.command == "build":
            images = [word for item in args.images for word in item.split()]
            build_images(engine, images, args.registry, args.tag, args.proxy_ca or None)
        elif args.command == "base":
            images = [word for item in args.images for word in item.split()]
            rebuild: bool | list[str] = (
                args.rebuild == "all" or args.rebuild.split(",") if args.rebuild else False
            )
            build_base_images(
                engine, args.proxy_ca or None, args.debian_mirror, rebuild, args.python312,
                images,
            )  # fmt: skip
        else:
            command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
            result = run_in_image(engine, args.image, command)
            sys.stdout.write(result.stdout)
            sys.stderr.write(result.stderr)
            return result.returncode
    except DevError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
