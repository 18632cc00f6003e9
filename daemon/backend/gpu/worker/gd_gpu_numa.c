/*
 * gd_gpu_numa.c - a device's worker thread on the CPUs next to the GPU.
 *
 * On a machine of several NUMA nodes each GPU hangs off one of them; pinned staging allocated
 * by a thread running there lands in that node's memory, so the copies between staging and the
 * GPU do not cross the inter-socket link. The kernel publishes the CPUs local to a PCI function
 * in /sys/bus/pci/devices/DDDD:BB:DD.F/local_cpulist; the worker binds itself to those CPUs (as
 * far as the process may run on them: systemd's CPUAffinity= still applies) before it
 * allocates staging. Nothing here can fail the start: without sysfs, or on a one-node machine,
 * the thread stays where it was.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gd_gpu_work.h"
#include "gd_log.h"

/* One "N" or "N-M" range of a CPU list into set; end points at what follows it. */
static bool parse_range(const char *p, char **end, cpu_set_t *set) {
  errno = 0;
  char *q;
  unsigned long lo = strtoul(p, &q, 10);
  if (q == p || errno)
    return false;
  unsigned long hi = lo;
  if (*q == '-') {
    const char *r = q + 1;
    hi = strtoul(r, &q, 10);
    if (q == r || errno || hi < lo)
      return false;
  }
  if (hi >= CPU_SETSIZE)
    return false;
  for (unsigned long cpu = lo; cpu <= hi; cpu++)
    CPU_SET(cpu, set);
  *end = q;
  return true;
}

bool gd__gpu_cpulist_parse(const char *text, cpu_set_t *set) {
  CPU_ZERO(set);
  const char *p = text;
  for (;;) {
    char *end;
    if (!parse_range(p, &end, set))
      return false;
    p = end;
    if (*p == ',') {
      p++;
      continue;
    }
    return (*p == '\0' || (*p == '\n' && p[1] == '\0')) && CPU_COUNT(set) > 0;
  }
}

/* The first line of a sysfs file, or false. */
static bool read_line(const char *path, char *buf, size_t len) {
  FILE *f = fopen(path, "r");
  if (!f)
    return false;
  bool ok = fgets(buf, (int)len, f) != NULL;
  fclose(f);
  return ok;
}

void gd__gpu_numa_bind(int ordinal) {
  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  char dir[96], path[128], text[4096], node[32] = "?";
  snprintf(dir, sizeof dir, "/sys/bus/pci/devices/%04x:%02x:%02x.0", (unsigned)prop.pciDomainID,
           (unsigned)prop.pciBusID, (unsigned)prop.pciDeviceID);
  snprintf(path, sizeof path, "%s/local_cpulist", dir);
  cpu_set_t local, allowed, both;
  if (!read_line(path, text, sizeof text) || !gd__gpu_cpulist_parse(text, &local)) {
    gd_debug("gpu: cuda:%d: no CPU list in %s: the worker stays where it is", ordinal, path);
    return;
  }
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
    return;
  CPU_AND(&both, &local, &allowed);
  if (CPU_COUNT(&both) == 0 || CPU_EQUAL(&both, &allowed))
    return; /* none of its CPUs is ours, or it may run everywhere we may: nothing to choose */
  int rc = pthread_setaffinity_np(pthread_self(), sizeof both, &both);
  snprintf(path, sizeof path, "%s/numa_node", dir);
  if (read_line(path, node, sizeof node))
    node[strcspn(node, "\n")] = '\0';
  if (rc != 0) {
    gd_warn("gpu: cuda:%d: cannot run its worker on NUMA node %s: %s", ordinal, node,
            strerror(rc));
    return;
  }
  gd_info("gpu: cuda:%d: worker and staging on NUMA node %s (%d CPUs)", ordinal, node,
          CPU_COUNT(&both));
}
