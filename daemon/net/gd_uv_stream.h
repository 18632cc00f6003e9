/*
 * gd_uv_stream.h - one stream socket handle, Unix (pipe) or TCP, as libuv sees it.
 *
 * Listeners (gd_listener.c) and connections (gd_conn.h) each hold one. Which member is
 * live follows from how the handle was initialised (uv_pipe_init or uv_tcp_init); `handle` and
 * `stream` are valid views of either, so close, read and write code needs no case split.
 */
#ifndef GD_UV_STREAM_H
#define GD_UV_STREAM_H

#include <uv.h>

typedef union {
  uv_handle_t handle;
  uv_stream_t stream;
  uv_pipe_t pipe;
  uv_tcp_t tcp;
} gd_uv_stream;

#endif /* GD_UV_STREAM_H */
