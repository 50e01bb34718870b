"""The bridge as a service: ingest, delivery, dead notices, settings and the store verbs.

- ``_service``: :class:`BridgeService`, every part as a supervised child; ``_worker_service``:
  :class:`WorkerService`, workers only, beside bridges on a shared store.
- ``_ingest``: poll -> commit -> ack. ``_delivery``: post -> confirm -> delivered.
- ``_dead_notices``: tell the gateway about each dead letter.
- ``_config``: :class:`BridgeConfig` and :func:`load_config` (flags, env, TOML).
- ``_admin``: what the bridge hands its admin endpoint (``tether.observe``'s terms).
- ``_store_status``: what ``tether store status`` shows.

A room, not a tier: ``tether.bridge`` exports its public names.
"""
