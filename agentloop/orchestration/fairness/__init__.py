"""Fair shares between tenants: concurrency keys, their limits and what happens past them."""
