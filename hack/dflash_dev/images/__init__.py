"""Container images without a Docker daemon: build them with whichever engine is here
(`make images`, `make base-images`) and run commands from their root filesystems through
chroot (`make test-images`, the executor's image mode). See docs/images.md."""
