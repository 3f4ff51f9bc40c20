"""`mesh access`: broker users, permissions and Redis ACL users per role (docs/security.md).

`mesh.access.roles` is the role model (pure data, no I/O); `mesh.access.provision`
applies it through the RabbitMQ management API and ``ACL SETUSER``.
"""
