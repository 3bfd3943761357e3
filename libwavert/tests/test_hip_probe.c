/* test_hip_probe.c — the HIP probe process, with fake_hip_probe as the runtime
 * ($WAVERT_HIP_LIBRARY). One scenario per run (argv[1]), since the backend is set up once:
 *   threaded-abort      another thread running; the runtime aborts while loading: the probe
 *                       (wavert-hip-probe, spawned) crashes, this process gets UNAVAILABLE;
 *   threaded-no-device  another thread running; the probe finds no device: count 0, nothing
 *                       loaded here, and the runtime's stdout line never reaches ours;
 *   fork-abort          no helper ($WAVERT_HIP_PROBE_HELPER=/nonexistent), one thread: the
 *                       fork-based probe catches the abort;
 *   threaded-no-helper  no helper, another thread running: no fork, the runtime is loaded
 *                       here (fake_hip_probe lacks hipGetErrorName: UNAVAILABLE naming it). */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <unistd.h>

#include "test_util.h"

static int wake[2];

static void *idle(void *arg) {
  (void)arg;
  char byte;
  while (read(wake[0], &byte, 1) < 0) {
  }
  return NULL;
}

static int threads(void) {
  DIR *tasks = opendir("/proc/self/task");
  CHECK(tasks != NULL);
  int n = 0;
  for (struct dirent *entry = readdir(tasks); entry != NULL; entry = readdir(tasks))
    n += entry->d_name[0] != '.';
  closedir(tasks);
  return n;
}

int main(int argc, char **argv) {
  CHECK(argc == 2);
  const char *scenario = argv[1];
  int threaded = strncmp(scenario, "threaded-", 9) == 0;
  pthread_t thread;
  if (threaded) {
    CHECK(pipe(wake) == 0);
    CHECK(pthread_create(&thread, NULL, idle, NULL) == 0);
  }
  CHECK(threads() == (threaded ? 2 : 1));

  /* Our stdout goes to a file while the backend starts. */
  FILE *captured = tmpfile();
  CHECK(captured != NULL);
  fflush(stdout);
  int saved_stdout = dup(STDOUT_FILENO);
  CHECK(saved_stdout >= 0 && dup2(fileno(captured), STDOUT_FILENO) >= 0);
  int32_t count = -1;
  wavert_status status = wavert_device_count(kDLROCM, &count);
  fflush(stdout);
  CHECK(dup2(saved_stdout, STDOUT_FILENO) >= 0);
  char output[256] = "";
  rewind(captured);
  size_t length = fread(output, 1, sizeof(output) - 1, captured);
  output[length] = '\0';
  printf("%s: %s, count %d, message '%s', stdout '%s'\n", scenario,
         wavert_status_string(status), (int)count, wavert_last_error(), output);

  if (strcmp(scenario, "threaded-abort") == 0 || strcmp(scenario, "fork-abort") == 0) {
    CHECK_STATUS(status, WAVERT_ERROR_UNAVAILABLE);
    CHECK_MESSAGE("the HIP runtime library crashed while loading (signal 6 in a probe process)");
    wavert_device *device = NULL;
    CHECK_STATUS(wavert_device_get(kDLROCM, 0, &device), WAVERT_ERROR_UNAVAILABLE);
    CHECK_MESSAGE("crashed while loading");
  } else if (strcmp(scenario, "threaded-no-device") == 0) {
    CHECK_OK(status);
    CHECK(count == 0);
    CHECK(output[0] == '\0');
    wavert_device *device = NULL;
    CHECK_STATUS(wavert_device_get(kDLROCM, 0, &device), WAVERT_ERROR_UNAVAILABLE);
    CHECK_MESSAGE("no AMD device");
  } else if (strcmp(scenario, "threaded-no-helper") == 0) {
    CHECK_STATUS(status, WAVERT_ERROR_UNAVAILABLE);
    CHECK_MESSAGE("the HIP runtime library has no symbol hipGetErrorName");
    CHECK(strstr(output, "fake_hip_probe: loaded") != NULL);
  } else {
    fprintf(stderr, "unknown scenario '%s'\n", scenario);
    return 1;
  }
  if (threaded) {
    CHECK(write(wake[1], "x", 1) == 1);
    pthread_join(thread, NULL);
  }
  printf("test_hip_probe %s: ok\n", scenario);
  return 0;
}
