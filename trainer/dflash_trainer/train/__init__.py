"""Online DFlash training: config, data stream, anchors + block mask + loss, distributed
loop, S3 checkpoints. Entry point: `python -m dflash_trainer.train --config run.yaml`."""
