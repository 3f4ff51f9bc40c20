"""The registry: leases, fencing tokens and the live-agent view (docs/design.md section 5).

- `mesh.registry.service.RegistryService`: the consumer of the registry queue (`mesh registry`).
- `mesh.registry.session.RegistrySession`: a worker's membership (register, heartbeat, fence).
- `mesh.registry.snapshot.AgentSnapshot`: a router's local view of live agents.
- `mesh.registry.lease` / `fencing`: the Redis scripts; `state`: the read model;
  `events` / `protocol`: the wire; `agent_card`: A2A Agent Cards as registrations.

Nothing is imported here, so importing one module does not pull in the others.
"""
