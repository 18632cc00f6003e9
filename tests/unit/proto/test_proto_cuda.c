/*
 * test_proto_cuda.c - cuda_register: the encoder's request decodes back to the same params
 * (with and without "device", fed whole and byte by byte), and every malformed form is
 * rejected with a message that names what is wrong, the next message decoding as usual.
 */
#include <check.h>
#include <string.h>

#include "tp_util.h"

#define MSGID 41u

/* Decodes sb then a ping; both feedings must agree; returns the trace (the caller frees). */
static tp_trace run(msgpack_sbuffer *sb) {
  ck_assert_int_eq(gp_encode_request(sb, 998, "ping"), 0);
  tp_trace whole = tp_decode(GP_ROLE_SERVER, NULL, (const uint8_t *)sb->data, sb->size,
                             TP_WHOLE, 0);
  tp_trace bytes = tp_decode(GP_ROLE_SERVER, NULL, (const uint8_t *)sb->data, sb->size,
                             TP_BYTES, 0);
  ck_assert_msg(tp_trace_equal(&whole, &bytes), "bytewise feeding differs");
  tp_trace_free(&bytes);
  msgpack_sbuffer_clear(sb);
  return whole;
}

static gp_cuda_reg sample(int64_t device) {
  gp_cuda_reg reg = {.bytes = (1ull << 33) + 5, .device = device};
  for (int i = 0; i < GP_CUDA_IPC_HANDLE_BYTES; i++)
    reg.handle[i] = (uint8_t)(255 - i);
  strcpy(reg.pci_bus_id, "0000:3B:00.0");
  return reg;
}

START_TEST(roundtrip) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  for (int64_t device = -1; device <= 3; device += 4) {
    gp_cuda_reg reg = sample(device);
    ck_assert_int_eq(gp_encode_cuda_register(&sb, MSGID, &reg), GP_OK);
    tp_trace t = run(&sb);
    char types[256];
    tp_trace_types(&t, types, sizeof types);
    ck_assert_str_eq(types, "REQUEST MESSAGE_END REQUEST MESSAGE_END");
    ck_assert_int_eq(t.ev[0].method, GP_METHOD_CUDA_REGISTER);
    ck_assert_uint_eq(t.ev[0].msgid, MSGID);
    ck_assert_mem_eq(t.ev[0].cuda.handle, reg.handle, GP_CUDA_IPC_HANDLE_BYTES);
    ck_assert_str_eq(t.ev[0].cuda.pci_bus_id, reg.pci_bus_id);
    ck_assert_uint_eq(t.ev[0].cuda.bytes, reg.bytes);
    ck_assert_int_eq(t.ev[0].cuda.device, device);
    tp_trace_free(&t);
  }
  gp_cuda_reg bad = sample(0);
  bad.pci_bus_id[0] = '\0';
  ck_assert_int_eq(gp_encode_cuda_register(&sb, MSGID, &bad), GP_E_INVALID_ARGUMENT);
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

/* [0, MSGID, "cuda_register", [{handle: bin handle_len (or a str), pci_bus_id, bytes}]],
 * less the key skip (NULL: none), plus an unknown key when extra. */
static void pack_params(msgpack_packer *pk, size_t handle_len, bool handle_str, const char *bus,
                        const char *skip, bool extra) {
  static const uint8_t handle[80];
  const char *keys[] = {"handle", "pci_bus_id", "bytes"};
  uint32_t n = 3 - (skip != NULL) + extra;
  tp_pack_request_start(pk, MSGID, "cuda_register", 1);
  msgpack_pack_map(pk, n);
  for (int i = 0; i < 3; i++) {
    if (skip && strcmp(skip, keys[i]) == 0)
      continue;
    tp_pack_str(pk, keys[i]);
    if (i == 0 && handle_str)
      tp_pack_str(pk, "not a handle");
    else if (i == 0)
      tp_pack_bin(pk, handle, handle_len);
    else if (i == 1)
      tp_pack_str(pk, bus);
    else
      msgpack_pack_uint64(pk, 4096);
  }
  if (extra) {
    tp_pack_str(pk, "size");
    msgpack_pack_uint64(pk, 1);
  }
}

/* The message in sb is rejected (INVALID_ARGUMENT, its msgid) with needle in the message. */
static void rejected(msgpack_sbuffer *sb, const char *needle) {
  tp_trace t = run(sb);
  char types[256];
  tp_trace_types(&t, types, sizeof types);
  ck_assert_str_eq(types, "REJECT REQUEST MESSAGE_END");
  ck_assert_int_eq(t.ev[0].err.code, GP_E_INVALID_ARGUMENT);
  ck_assert_uint_eq(t.ev[0].msgid, MSGID);
  ck_assert_msg(strstr(t.ev[0].err.message, needle) != NULL, "message \"%s\" lacks \"%s\"",
                t.ev[0].err.message, needle);
  tp_trace_free(&t);
}

START_TEST(malformed) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  pack_params(&pk, 63, false, "0000:3b:00.0", NULL, false);
  rejected(&sb, "handle: must be 64 bytes, got 63");
  pack_params(&pk, 65, false, "0000:3b:00.0", NULL, false);
  rejected(&sb, "handle: must be 64 bytes, got 65");
  pack_params(&pk, 64, true, "0000:3b:00.0", NULL, false);
  rejected(&sb, "handle: must be a bin");
  pack_params(&pk, 64, false, "", NULL, false);
  rejected(&sb, "pci_bus_id: must be 1..31 bytes, got 0");
  pack_params(&pk, 64, false, "0000:3b:00.0 and then a good deal more", NULL, false);
  rejected(&sb, "pci_bus_id: must be 1..31 bytes");
  pack_params(&pk, 64, false, "0000:3b:00.0", "handle", false);
  rejected(&sb, "missing \"handle\"");
  pack_params(&pk, 64, false, "0000:3b:00.0", "pci_bus_id", false);
  rejected(&sb, "missing \"pci_bus_id\"");
  pack_params(&pk, 64, false, "0000:3b:00.0", "bytes", false);
  rejected(&sb, "missing \"bytes\"");
  pack_params(&pk, 64, false, "0000:3b:00.0", NULL, true);
  rejected(&sb, "unknown key \"size\"");
  tp_pack_request_start(&pk, MSGID, "cuda_register", 0);
  rejected(&sb, "cuda_register takes [{");
  tp_pack_request_start(&pk, MSGID, "cuda_register", 1);
  msgpack_pack_uint64(&pk, 7);
  rejected(&sb, "params[0] must be a map, got an integer");
  tp_pack_request_start(&pk, MSGID, "cuda_register", 1);
  msgpack_pack_map(&pk, 1);
  tp_pack_str(&pk, "bytes");
  msgpack_pack_int64(&pk, -1);
  rejected(&sb, "bytes: must be a non-negative integer");
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

static Suite *cuda_suite(void) {
  Suite *s = suite_create("proto_cuda");
  TCase *tc = tcase_create("cuda");
  tcase_add_test(tc, roundtrip);
  tcase_add_test(tc, malformed);
  suite_add_tcase(s, tc);
  return s;
}

TP_MAIN(cuda_suite)
