/*
 * gd_cli.h - gemmd's command line (as gemmd(8) and docs/usage.md describe it):
 *   gemmd [--config FILE] [--listen ADDR]... [--backend auto|gpu|cpu]
 *         [--log-level LEVEL] [--check-config]
 * Flags override the config file; --listen given at least once replaces the
 * file's list.
 */
#ifndef GD_CLI_H
#define GD_CLI_H

#include <stdbool.h>
#include <stddef.h>

#include "gd_config.h"

typedef struct {
  const char *config_path;                     /* --config, or NULL */
  const char *listen[GD_CONFIG_LISTEN_MAX];    /* --listen, in order (argv strings) */
  size_t listen_count;
  bool has_backend;
  gd_backend_kind backend;
  bool has_log_level;
  gd_log_level log_level;
  bool check_config;
  bool help, version;
} gd_cli;

/* Parses argv. 0 on success; GP_E_INVALID_ARGUMENT with a message in err (usage error). */
int gd_cli_parse(int argc, char **argv, gd_cli *cli, gp_error *err);

/* Applies the overrides to cfg. GP_E_INVALID_ARGUMENT with err when a --listen address does
 * not parse. */
int gd_cli_apply(const gd_cli *cli, gd_config *cfg, gp_error *err);

/* The usage text. */
const char *gd_cli_usage(void);

#endif /* GD_CLI_H */
