"""`kubectl explain` shows the models' descriptions, so the cluster documents the API."""

from __future__ import annotations

from typing import Any

from dflash_dev.pytest_plugin import ClusterHandle


def test_kubectl_explain_shows_the_training_fields_with_their_descriptions(
    cluster: ClusterHandle, dflashrun_crd: str, eventually: Any
) -> None:
    def explained() -> str | None:
        # The OpenAPI document is published a moment after the CRD is Established.
        result = cluster.kubectl("explain", "dflashrun.spec.training", check=False)
        return result.stdout if result.returncode == 0 and "learningRate" in result.stdout else None

    text = eventually("kubectl explain dflashrun.spec.training", explained, timeout=30)

    assert "Peak AdamW learning rate" in text
    assert "anchorsPerSequence" in text and "checkpointEverySteps" in text


def test_kubectl_explain_points_refused_credentials_to_the_secret(
    cluster: ClusterHandle, dflashrun_crd: str
) -> None:
    result = cluster.kubectl("explain", "dflashrun.spec.storage.credentialsSecretRef")

    assert "Secret with the S3 credentials" in result.stdout
