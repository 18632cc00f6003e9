/*
 * gd_peers.h - open connections counted per peer, for limits.max_connections_per_peer and
 * limits.connections_reserve. A peer is the client's uid on a Unix socket (SO_PEERCRED) and its
 * address on TCP (the port left out), written as a short key ("uid 1000", "tcp 127.0.0.1").
 * A plain array searched linearly: there are few distinct peers, and it is touched only when a
 * connection opens or closes.
 *
 * Every loop counts here, under the table's own lock (gd_peers_lock), which also guards what
 * gd_server.h marks "peers lock" (the list and count of open connections, session ids, failed
 * auths per peer). It is the innermost lock: taken inside the scheduler's or alone, never held
 * while any other lock is taken or a scheduler, backend or libuv call is made.
 */
#ifndef GD_PEERS_H
#define GD_PEERS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GD_PEER_KEY_MAX 72 /* "tcp " and an IPv6 address of up to 63 bytes */

typedef struct {
  char key[GD_PEER_KEY_MAX];
  uint32_t count;
  uint64_t reserved;       /* budget bytes its connections' jobs hold until computed */
  uint32_t fds;            /* descriptors received (SCM_RIGHTS) and waiting, all its conns */
} gd_peer_count;

typedef struct {
  gd_peer_count *items;
  size_t n, cap;
  pthread_mutex_t mu;      /* see the top */
  bool mu_ready;
} gd_peers;

/* Makes the lock (before any loop counts here): 0, or -1. */
int gd_peers_init(gd_peers *p);
void gd_peers_lock(gd_peers *p);
void gd_peers_unlock(gd_peers *p);

/* One more connection of key: 0, or -1 when out of memory (nothing counted). */
int gd_peers_add(gd_peers *p, const char *key);
/* One connection of key less (it must have been added). */
void gd_peers_remove(gd_peers *p, const char *key);
/* Open connections of key (0 for a peer not seen). */
uint32_t gd_peers_count(const gd_peers *p, const char *key);
/* Budget bytes held by key's jobs: charge adds, uncharge takes off (a peer no longer listed
 * has nothing to take off: its last connection closed). */
void gd_peers_charge(gd_peers *p, const char *key, uint64_t bytes);
void gd_peers_uncharge(gd_peers *p, const char *key, uint64_t bytes);
uint64_t gd_peers_reserved(const gd_peers *p, const char *key);

/* A descriptor received for key waits (true: counted, under cap) or is used up. A peer not
 * listed takes none and gives back nothing. */
bool gd_peers_take_fd(gd_peers *p, const char *key, uint32_t cap);
void gd_peers_give_fd(gd_peers *p, const char *key);

/* The peer with the most open connections, or NULL when there is none. */
const gd_peer_count *gd_peers_greediest(const gd_peers *p);
void gd_peers_free(gd_peers *p);

#endif /* GD_PEERS_H */
