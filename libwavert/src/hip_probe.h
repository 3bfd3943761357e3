/*
 * hip_probe.h — the contract between backend_hip.c and wavert-hip-probe (hip_probe.c), the
 * helper program that opens the HIP runtime in a process of its own: its arguments are the
 * library paths or names to try, in order; its exit status is one of these.
 */
#ifndef WAVERT_HIP_PROBE_H
#define WAVERT_HIP_PROBE_H

#define WAVERT__HIP_PROBE_NAME "wavert-hip-probe"

enum {
  WAVERT__PROBE_DEVICES = 0,      /* hipInit and hipGetDeviceCount succeeded, count > 0 */
  WAVERT__PROBE_NO_DEVICE = 10,   /* hipErrorNoDevice, or a count of 0 */
  WAVERT__PROBE_INIT_FAILED = 11, /* another hipInit / hipGetDeviceCount error, or no symbol */
  WAVERT__PROBE_NO_LIBRARY = 12,  /* none of the libraries opens */
  WAVERT__PROBE_USAGE = 13,       /* no library given */
};

/* Open the first of `names` (`count` paths or names for dlopen) that loads, call hipInit and
 * hipGetDeviceCount; returns the exit status above. Runs in the probe process only. */
int wavert__hip_probe_run(int count, char *const *names);

#endif /* WAVERT_HIP_PROBE_H */
