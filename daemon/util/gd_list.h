/*
 * gd_list.h - unlinking a node from an intrusive doubly linked list.
 *
 * The daemon keeps several lists of different node types (the CPU backend's live jobs, a GPU's
 * jobs, the scheduler's jobs, a session's jobs, every loop's sessions), each node with `prev`
 * and `next` pointers (or links of other names, for a node on two lists) and the list reached
 * through a head pointer. A macro rather than a function so that one piece of code serves
 * every node type.
 */
#ifndef GD_LIST_H
#define GD_LIST_H

/* Takes node out of the list whose first node is `head` (an lvalue: updated when node is first).
 * node must be in that list. node's own prev/next are left as they were. Arguments are
 * evaluated more than once: pass plain variables or members. */
#define GD_LIST_UNLINK(head, node) GD_LIST_UNLINK_AT(head, node, prev, next)

/* The same for a node on more than one list: prev and next name the links of this one. */
#define GD_LIST_UNLINK_AT(head, node, prev, next) \
  do {                                            \
    if ((node)->prev)                             \
      (node)->prev->next = (node)->next;          \
    else                                          \
      (head) = (node)->next;                      \
    if ((node)->next)                             \
      (node)->next->prev = (node)->prev;          \
  } while (0)

#endif /* GD_LIST_H */
