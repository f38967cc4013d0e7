/*
 * tcp.h: the tcp backend's own entry points, beneath its ops table. The daemon reaches the
 * backend only through the registry (transport.h: scd_transport_lookup, prepare, create);
 * these are for the backend itself and for its tests, which build meshes from sockets
 * they opened.
 */
#ifndef SCD_TRANSPORT_TCP_H
#define SCD_TRANSPORT_TCP_H

#include <stdint.h>

#include "transport/transport.h"

/* Opens the data-plane listening socket (before the world forms, so that its port can be
 * announced). port 0 picks a free port; *port_p gets the bound port. */
sc_status_t scd_tcp_listen(const char *bind_addr, uint16_t port, int *fd_p, uint16_t *port_p);

/*
 * Builds the mesh: connects to every lower rank (addrs[r], ports[r]) and accepts every
 * higher rank on listen_fd (each connection opens with a hello of (world_id, rank), and a
 * connection with another world_id or a duplicate rank is refused), each side proving that
 * it holds auth_key (tcp_auth.h; NULL: an all-zero key, which proves nothing). protect is
 * data_protection (tcp_seal.h: every peer must use the same; anything but none needs a
 * key that is not all zeros). TCP_NODELAY,
 * large socket buffers, and a scratch of scratch_bytes preallocated and pre-faulted for the
 * ring. Takes ownership of listen_fd (closed once the mesh is complete, or on failure).
 * A failure is logged here, and its text is left in scd_transport_error().
 */
sc_status_t scd_tcp_create(int listen_fd, int rank, int size, const char *const *addrs,
			   const uint16_t *ports, uint64_t world_id, const uint8_t *auth_key,
			   int protect, size_t scratch_bytes, int timeout_ms,
			   scd_transport_t **t_p);

#endif
