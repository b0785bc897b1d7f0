"""`dara-train`: multi-reward RL with fused DARA/GDPO/GRPO advantages.

    dara-train --preset toy --steps N --output-dir DIR [--rollout hf|vllm] [--set key=value ...]
    dara-train plot OUTPUT_DIR | RUN_DIR RUN_DIR ... | RUNS_DIR [--out PNG]
    torchrun --nproc_per_node 2 -m dara_train.cli --preset toy ...   (FSDP2 over 2 ranks)
"""
from __future__ import annotations

import argparse
import sys


def train_main(argv) -> None:
    parser = argparse.ArgumentParser(prog="dara-train", description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="toy", help="a config under trainer/dara_train/configs (default: toy)")
    parser.add_argument("--config", help="a YAML file applied after the preset")
    parser.add_argument("--steps", type=int)
    parser.add_argument("--output-dir")
    parser.add_argument("--rollout", choices=("hf", "vllm"),
                        help="rollout engine (default: the preset's rollout.engine: vllm for math and toolcall, "
                             "hf for the toy presets)")
    parser.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)

    from .config import load_config

    overrides = list(args.overrides)
    if args.steps is not None:
        overrides.append(f"steps={args.steps}")
    if args.output_dir:
        overrides.append(f"output_dir={args.output_dir}")
    if args.rollout:
        overrides.append(f"rollout.engine={args.rollout}")
    cfg = load_config(args.preset, args.config, overrides)

    import torch.distributed as dist

    from .train import Trainer

    trainer = None
    try:
        trainer = Trainer(cfg, resume=args.resume)
        trainer.run()
    except BaseException:
        if trainer is not None:
            trainer.close()
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "plot":
        from .plot import plot_main

        plot_main(argv[1:])
    else:
        train_main(argv)


if __name__ == "__main__":
    main()
