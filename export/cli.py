"""``transduce export CHECKPOINT OUT_DIR``."""

from __future__ import annotations

import argparse
import json
import sys
import time


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the export command."""
    parser.add_argument("checkpoint", help="transduce checkpoint (.pt) to export")
    parser.add_argument("out_dir", help="model directory to write (encoder.onnx, decoder.onnx, manifest.json, ...)")
    parser.add_argument("--opset", type=int, default=17, help="ONNX opset version")
    parser.add_argument(
        "--no-verify", action="store_true", help="skip the PyTorch vs. onnxruntime parity check (not recommended)"
    )
    parser.add_argument("--tolerance", type=float, default=1e-4, help="max |delta log-prob| accepted by verification")
    parser.add_argument("--name", default=None, help="model name for the manifest (default: checkpoint's name)")


def run(args: argparse.Namespace) -> int:
    """Export, verify, print a one-line summary; errors are one line on stderr and exit status 1."""
    from export.onnx_export import ExportConfig, export_model
    from export.verify import VerificationError

    started = time.monotonic()
    print(f"exporting {args.checkpoint} -> {args.out_dir} (2 graphs + verification) ...", file=sys.stderr)
    try:
        manifest = export_model(
            args.checkpoint,
            args.out_dir,
            ExportConfig(opset=args.opset, verify=not args.no_verify, tolerance=args.tolerance, model_name=args.name),
        )
    except (ValueError, VerificationError, OSError) as exc:
        print(f"transduce export: {exc}", file=sys.stderr)
        return 1
    summary = {
        "model_dir": str(args.out_dir),
        "model_name": manifest["model_name"],
        "pairs": manifest["pairs"],
        "seconds": round(time.monotonic() - started, 1),
    }
    if "verification" in manifest:
        summary["max_abs_diff_log_probs"] = manifest["verification"]["max_abs_diff"]
        summary["greedy_identical"] = manifest["verification"]["greedy_identical"]
    print(json.dumps(summary))
    return 0
