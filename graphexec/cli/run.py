"""``graphexec run MODEL``: run once and print (or save) the outputs."""

from __future__ import annotations

import argparse

import numpy as np

from graphexec.cli._common import load_engine, make_inputs

NAME = "run"
HELP = "run once and print (or save) the outputs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    given = parser.add_mutually_exclusive_group()
    given.add_argument("--input", nargs="+", help=".npy files, one per input, or an .npz with in0, in1, ...")
    given.add_argument("--random", action="store_true",
                       help="random inputs of the exported shapes or --input-shape (the default)")
    parser.add_argument("--output", help="save the outputs to this .npz")


def command(args: argparse.Namespace) -> None:
    with load_engine(args) as engine:
        feeds = dict(zip(engine.input_names, make_inputs(engine, args)))
        result = engine.forward(feeds)
    for name, x in feeds.items():
        print(f"{name}: shape {x.shape} {x.dtype}")
    for name, value in result.items():
        print(f"{name}: shape {value.shape} {value.dtype} min {value.min():.6g} max {value.max():.6g}")
    if args.output:
        target = args.output if args.output.endswith(".npz") else args.output + ".npz"
        np.savez(target, **result)
        print(f"saved {target}")
