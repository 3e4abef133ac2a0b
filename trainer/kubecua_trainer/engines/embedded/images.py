"""Screenshots in the embedded engine: content digests (a stored prefix is reused only where its
screenshots have the same pixels), the image pads' runs in a prompt, and the processor's pixel
values, computed in the caller's thread where possible so the worker never waits on the CPU."""

from __future__ import annotations

import hashlib
import threading
import weakref
from typing import Any

import torch
from PIL import Image

from kubecua_trainer.engines.embedded.sequence import Request


def image_digest(image: Image.Image) -> bytes:
    """Content digest of a screenshot: equal pixels, equal digest, whatever object holds them."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{image.mode}:{image.size}".encode())
    h.update(image.tobytes())
    return h.digest()


def pad_runs(ids: torch.Tensor, pad_id: int) -> list[tuple[int, int]]:
    """[start, end) of each run of image pads.

    Example: pad 9, ids [1, 9, 9, 2, 9] -> [(1, 3), (4, 5)].
    """
    is_pad = torch.cat([torch.tensor([False]), ids == pad_id, torch.tensor([False])]).int()
    edges = (is_pad[1:] - is_pad[:-1]).nonzero()[:, 0].tolist()
    return list(zip(edges[0::2], edges[1::2], strict=True))


class Screenshots:
    """Digests (cached by image object: an episode hands the same screenshots back every turn) and
    pixel values of requests' screenshots."""

    def __init__(self, processor: Any):
        self.processor = processor
        self._digests: dict[int, tuple[weakref.ref[Image.Image], bytes]] = {}
        self._lock = threading.Lock()  # prepare() runs in callers' threads

    def digest(self, image: Image.Image) -> bytes:
        with self._lock:
            held = self._digests.get(id(image))
            if held is not None and held[0]() is image:
                return held[1]
        digest = image_digest(image)
        with self._lock:
            if len(self._digests) > 4096:  # forget screenshots that no longer exist
                self._digests = {k: v for k, v in self._digests.items() if v[0]() is not None}
            self._digests[id(image)] = (weakref.ref(image), digest)
        return digest

    def prepare(self, req: Request) -> None:
        """CPU work of a request, run in the caller's thread before it is queued: the digests of
        its screenshots and the processor's pixel values of its newest one (the screenshot a turn
        adds; older ones are normally in a stored prefix). Per-image processing gives the same
        pixel values as processing the images together, which pixels() does for any other."""
        req.digests = [self.digest(im) for im in req.images]
        last = len(req.images) - 1
        proc = self.processor.image_processor(images=[req.images[last]], return_tensors="pt")
        req.prepared[last] = (proc["pixel_values"], proc["image_grid_thw"])

    def pixels(self, req: Request, first: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(pixel_values, image_grid_thw) of req.images[first:], from prepare where it ran."""
        todo = [i for i in range(first, len(req.images)) if i not in req.prepared]
        if todo:
            proc = self.processor.image_processor(
                images=[req.images[i] for i in todo], return_tensors="pt"
            )
            sizes = proc["image_grid_thw"].prod(-1).tolist()
            for i, pv, grid in zip(
                todo, proc["pixel_values"].split(sizes), proc["image_grid_thw"], strict=True
            ):
                req.prepared[i] = (pv, grid[None])
        parts = [req.prepared[i] for i in range(first, len(req.images))]
        if not parts:
            return None, None
        return torch.cat([p for p, _ in parts]), torch.cat([g for _, g in parts])
