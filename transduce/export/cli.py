"""``transduce export CHECKPOINT OUT_DIR``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transduce.export.onnx_export import ExportConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the export command."""
    parser.add_argument("checkpoint", help="transduce checkpoint (.pt) to export")
    parser.add_argument("out_dir", help="model directory to write (encoder.onnx, decoder.onnx, manifest.json, ...)")
    parser.add_argument("--opset", type=int, default=17, help="ONNX opset version")
    parser.add_argument(
        "--no-verify", action="store_true", help="skip the PyTorch vs. onnxruntime parity check (not recommended)"
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        default=None,
        help="max |delta log-prob| vs. PyTorch fp32 accepted by verification (default: 1e-4 for "
        "float32, 0.1 for float16)",
    )
    parser.add_argument(
        "--dtype",
        choices=["float32", "float16", "int8"],
        default="float32",
        help="float32; float16 weights and caches for GPUs; int8: the float32 export (verified) with "
        "its MatMul weights quantised to int8 for CPUs (faster, outputs differ slightly)",
    )
    parser.add_argument("--name", default=None, help="model name for the manifest (default: checkpoint's name)")
    parser.add_argument(
        "--shortlist",
        default=None,
        help="vocabulary shortlist table from `transduce shortlist` (default: shortlist.npz beside the checkpoint, "
        "if there is one); the CPU engine then scores only each batch's candidate pieces",
    )
    parser.add_argument("--no-shortlist", action="store_true", help="export without a vocabulary shortlist")


def run(args: argparse.Namespace) -> int:
    """Export, verify, print a one-line summary; errors are one line on stderr: exit status 2 for a bad option, 1
    for an export that failed."""
    from transduce.engine.shortlist import sibling_table
    from transduce.export.onnx_export import ExportConfig, export_model
    from transduce.export.verify import VerificationError

    started = time.monotonic()
    int8 = args.dtype == "int8"
    shortlist = (
        None if args.no_shortlist else Path(args.shortlist) if args.shortlist else sibling_table(args.checkpoint)
    )
    try:  # the options first: a bad one is exit 2, as in every command (a failed export is 1)
        config = ExportConfig(
            opset=args.opset,
            verify=not args.no_verify,
            tolerance=args.tolerance,
            model_name=args.name,
            dtype="float32" if int8 else args.dtype,
            shortlist=shortlist,
        )
        if int8:
            from transduce.export.quantize import seven_bits

            seven_bits()  # (a bad TRANSDUCE_INT8_WEIGHT_BITS was found after the float32 export and its check)
    except ValueError as exc:
        print(f"transduce export: {exc}", file=sys.stderr)
        return 2
    if not Path(args.checkpoint).is_file():
        problem = "is a directory: name the checkpoint file (.pt) in it" if Path(args.checkpoint).is_dir() else ""
        print(f"transduce export: checkpoint {args.checkpoint} {problem or 'does not exist'}", file=sys.stderr)
        return 1
    print(
        f"exporting {args.checkpoint} -> {args.out_dir} (encoder, decoder, gather"
        f"{'' if args.no_verify else ' + verification'}) ...",
        file=sys.stderr,
    )
    if shortlist is not None and not shortlist.is_file():
        print(f"transduce export: shortlist {shortlist} does not exist", file=sys.stderr)
        return 1
    try:
        if int8:
            manifest = _export_int8(args.checkpoint, Path(args.out_dir), config)
        else:
            manifest = export_model(args.checkpoint, args.out_dir, config)
    except (ValueError, VerificationError, OSError, RuntimeError) as exc:  # onnxruntime raises RuntimeErrors
        print(f"transduce export: {exc}", file=sys.stderr)
        return 1
    summary = {
        "model_dir": str(args.out_dir),
        "model_name": manifest["model_name"],
        "dtype": manifest["dtype"],
        "pairs": manifest["pairs"],
        "seconds": round(time.monotonic() - started, 1),
    }
    if "verification" in manifest:
        summary["max_abs_diff_log_probs"] = manifest["verification"]["max_abs_diff"]
        summary["greedy_identical"] = manifest["verification"]["greedy_identical"]
    if "float32_verification" in manifest:  # int8: the float32 graphs it was quantised from were verified
        summary["float32_max_abs_diff_log_probs"] = manifest["float32_verification"]["max_abs_diff"]
        summary["float32_greedy_identical"] = manifest["float32_verification"]["greedy_identical"]
    print(json.dumps(summary))
    return 0


def _export_int8(checkpoint: str, out_dir: Path, config: ExportConfig) -> dict[str, Any]:
    """A verified float32 export in a temporary directory, quantised into ``out_dir``."""
    import tempfile

    from transduce.export.files import ONNX_EXPORT, check_target
    from transduce.export.onnx_export import export_inputs, export_model
    from transduce.export.quantize import quantize_model_dir

    inputs = export_inputs(checkpoint, config, out_dir)
    out_dir = check_target(out_dir, marker=ONNX_EXPORT, inputs=inputs)  # before the float32 export, not after it
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir.parent, prefix=f".{out_dir.name}.fp32.") as tmp:
        fp32 = export_model(checkpoint, Path(tmp) / "model", config)
        extra = {"float32_verification": fp32["verification"]} if "verification" in fp32 else {}
        return quantize_model_dir(Path(tmp) / "model", out_dir, extra=extra, inputs=inputs)
