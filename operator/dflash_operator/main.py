"""Entry point: `dflash-operator [flags]` (or `kopf run -m dflash_operator.main`, configured by
`DFLASH_*` env). Importing this module registers every kopf handler.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any, cast

import kopf

from dflash_operator.config import ConfigError, OperatorConfig, add_flags, load_config
from dflash_operator.handlers import children, lifecycle, runs
from dflash_operator.leadership import (
    exit_on_lost_lease,
    lease_settings,
    process_identity,
    standby_health,
)
from dflash_operator.pools import PoolsError, load_pools
from dflash_operator.readiness import ReadinessServer, check_training
from dflash_operator.runtime.kube import Kube, load_api_client
from dflash_operator.runtime.leader import LeaseElector
from dflash_operator.version import OPERATOR_VERSION

HANDLER_MODULES = (children, lifecycle, runs)
EXIT_BAD_CONFIG = 2
# Named, not __name__: `python -m dflash_operator.main` would log as __main__, outside our level.
log = logging.getLogger("dflash_operator.main")
# A readiness check waits at most this long for the API server (the probe times out at 5 s).
PROBE_TIMEOUT = 4.0


def setup_logging(config: OperatorConfig) -> None:
    """Quiet by default: kopf and the HTTP client only say something when it matters."""
    log_format = kopf.LogFormat.JSON if config.log_format == "json" else kopf.LogFormat.PLAIN
    kopf.configure(log_format=log_format)
    logging.getLogger().setLevel(logging.WARNING)
    logging.getLogger("dflash_operator").setLevel(config.log_level)
    for noisy in ("kopf", "kubernetes", "urllib3", "aiohttp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="dflash-operator",
        description="Reconcile DFlashRun resources into a DFlash drafter training pipeline.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {OPERATOR_VERSION}")
    add_flags(parser)
    args = parser.parse_args(argv)
    try:
        config = load_config(flags=args)
        pools = load_pools(config.pools_file)
    except (ConfigError, PoolsError) as error:
        print(f"dflash-operator: {error}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    setup_logging(config)
    log.info(
        "dflash-operator %s starting: regen image %s, trainer image %s",
        OPERATOR_VERSION,
        config.regen_image,
        config.trainer_image,
    )
    settings = None
    if config.leader_election:
        try:
            settings = lease_settings(config)
        except ConfigError as error:
            print(f"dflash-operator: {error}", file=sys.stderr)
            return EXIT_BAD_CONFIG
    readiness = None
    if config.readiness_port:
        # Before the election, so that a standby is Ready too; its own client, so that a slow
        # probe never delays a lease renewal.
        probe_kube = Kube(load_api_client(pool_size=1), config.connect_timeout, PROBE_TIMEOUT)
        readiness = ReadinessServer(
            config.bind_address,
            config.readiness_port,
            lambda: check_training(probe_kube, config.default_launcher),
        ).start()
    elector = None
    if settings is not None:
        kube = Kube(load_api_client(pool_size=2), config.connect_timeout, config.request_timeout)
        elector = LeaseElector(kube, settings)
        with standby_health(config):
            elector.acquire()
        elector.keep_leading(on_lost=exit_on_lost_lease)
    try:
        kopf.run(
            clusterwide=config.clusterwide,
            namespaces=config.namespaces,
            standalone=True,
            # kopf's `Identity` is a NewType of str in a private module: a plain str, cast.
            identity=cast(Any, process_identity()),
            liveness_endpoint=config.liveness_endpoint,
            memo=kopf.Memo(config=config, pools=pools),
        )
    finally:
        if elector is not None:
            elector.release()
        if readiness is not None:
            readiness.stop()
    return 0


if __name__ == "__main__":
    sys.exit(cli())
