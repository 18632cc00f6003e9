/*
 * gd_cli.c - see gd_cli.h.
 */
#include "gd_cli.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

const char *gd_cli_usage(void) {
  return "usage: gemmd [--config FILE] [--listen ADDR]... [--backend auto|gpu|cpu]\n"
         "             [--log-level error|warn|info|debug] [--check-config]\n"
         "       gemmd -h|--help | -V|--version\n"
         "  ADDR: unix:PATH | tcp:HOST:PORT | tcp:[V6]:PORT\n"
         "  Without --config, reads " GD_CONFIG_DEFAULT_PATH " when it exists.\n";
}

int gd_cli_parse(int argc, char **argv, gd_cli *cli, gp_error *err) {
  static const struct option options[] = {
      {"config", required_argument, NULL, 'c'},    {"listen", required_argument, NULL, 'l'},
      {"backend", required_argument, NULL, 'b'},   {"log-level", required_argument, NULL, 'L'},
      {"check-config", no_argument, NULL, 'C'},    {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, 'V'},         {NULL, 0, NULL, 0}};
  memset(cli, 0, sizeof *cli);
  optind = 1;
  opterr = 0;
  int opt;
  /* "+": stop at the first argument; ":": a missing value is ':', not '?'; -h and -V. */
  while ((opt = getopt_long(argc, argv, "+:hV", options, NULL)) != -1) {
    switch (opt) {
    case 'c': cli->config_path = optarg; break;
    case 'l':
      if (cli->listen_count == GD_CONFIG_LISTEN_MAX)
        return gp_error_set(err, GP_E_INVALID_ARGUMENT, "more than %d --listen addresses",
                            GD_CONFIG_LISTEN_MAX);
      cli->listen[cli->listen_count++] = optarg;
      break;
    case 'b':
      if (gd_backend_kind_from_name(optarg, &cli->backend) != 0)
        return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                            "--backend: expected auto, gpu or cpu, got \"%s\"", optarg);
      cli->has_backend = true;
      break;
    case 'L':
      if (gd_log_level_from_name(optarg, strlen(optarg), &cli->log_level) != 0)
        return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                            "--log-level: expected error, warn, info or debug, got \"%s\"",
                            optarg);
      cli->has_log_level = true;
      break;
    case 'C': cli->check_config = true; break;
    case 'h': cli->help = true; break;
    case 'V': cli->version = true; break;
    case ':':
      return gp_error_set(err, GP_E_INVALID_ARGUMENT, "option %s needs a value",
                          argv[optind - 1]);
    default:
      /* an unknown short option is in optopt; an unknown long one is the argument itself */
      if (optopt)
        return gp_error_set(err, GP_E_INVALID_ARGUMENT, "unknown option -%c", optopt);
      return gp_error_set(err, GP_E_INVALID_ARGUMENT, "unknown option %s", argv[optind - 1]);
    }
  }
  if (optind < argc)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "unexpected argument \"%s\"", argv[optind]);
  return 0;
}

int gd_cli_apply(const gd_cli *cli, gd_config *cfg, gp_error *err) {
  if (cli->listen_count > 0) {
    for (size_t i = 0; i < cli->listen_count; i++) {
      gp_addr addr;
      gp_error why;
      if (gp_addr_parse(cli->listen[i], GP_ADDR_LISTEN, &addr, &why) != 0)
        return gp_error_set(err, why.code, "--listen: %s", why.message);
    }
    for (size_t i = 0; i < cli->listen_count; i++)
      snprintf(cfg->listen[i], GP_ADDR_TEXT_MAX, "%s", cli->listen[i]);
    cfg->listen_count = cli->listen_count;
  }
  if (cli->has_backend)
    cfg->backend = cli->backend;
  if (cli->has_log_level)
    cfg->log_level = cli->log_level;
  return 0;
}
