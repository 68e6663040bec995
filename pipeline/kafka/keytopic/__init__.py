"""The key topic: wrapped data keys, erasure tombstones and markers, and following erasures."""
