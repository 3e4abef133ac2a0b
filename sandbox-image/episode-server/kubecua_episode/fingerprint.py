"""An episode's start fingerprint (the wire model: kubecua_sandbox_client's StartFingerprint):
a perceptual hash of the first settled screenshot at full size, and a hash of the first
accessibility tree when the observation asked for one. Computed here, beside the full-size
screenshot, so every caller (the trainer, task verification) compares the same thing whatever
size or format it asked its observations in. dHash (imagehash's) because it ignores what a
compressed or slightly different frame changes and sees what a different layout changes:
kubecua_sandbox_client/fingerprint.py says how two are compared."""

from __future__ import annotations

import hashlib
import io

import imagehash
from PIL import Image

from kubecua_sandbox_client import StartFingerprint

HASH_SIZE = 16  # 16x16 = 256 bits: a 9x8 (64-bit) hash could not see one window moved a little


def start_fingerprint(png: bytes, a11y: str | None) -> StartFingerprint:
    with Image.open(io.BytesIO(png)) as img:
        screen = str(imagehash.dhash(img, hash_size=HASH_SIZE))
    tree = hashlib.sha256(a11y.encode()).hexdigest() if a11y is not None else None
    return StartFingerprint(screen=screen, a11y=tree)
