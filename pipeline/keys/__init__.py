"""Per-case data keys, key-encryption keys per tenant, and envelope encryption (crypto-shredding)."""
