/* Leveled logging to stderr as plain text or JSON lines. Each line is built
 * in a stack buffer and written with one write(2), so lines from threads and
 * processes sharing the fd never interleave. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <sandbox/core.h>

#define LOG_LINE_MAX 4096

static const char *log_component = "sandbox";
static sbx_log_level log_level = SBX_LOG_INFO;
static sbx_log_format log_format = SBX_LOG_PLAIN;
static int log_fd = STDERR_FILENO;

static const char *level_name(sbx_log_level level) {
  switch (level) {
  case SBX_LOG_ERROR: return "error";
  case SBX_LOG_WARN: return "warn";
  case SBX_LOG_INFO: return "info";
  case SBX_LOG_DEBUG: break;
  }
  return "debug";
}

void sbx_log_setup(const char *component, sbx_log_level level, sbx_log_format fmt) {
  if (component) log_component = component;
  log_level = level;
  log_format = fmt;
}

void sbx_log_set_level(sbx_log_level level) { log_level = level; }
sbx_log_level sbx_log_get_level(void) { return log_level; }
void sbx_log_fd(int fd) { log_fd = fd; }

int sbx_log_level_parse(const char *s) {
  for (int i = SBX_LOG_ERROR; i <= SBX_LOG_DEBUG; i++)
    if (strcasecmp(s, level_name((sbx_log_level)i)) == 0) return i;
  if (strcasecmp(s, "warning") == 0) return SBX_LOG_WARN;
  return -1;
}

/* JSON-escape src into dst (bounded); returns bytes written. */
static size_t json_escape(char *dst, size_t cap, const char *src) {
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)src; *p && o + 7 < cap; p++) {
    unsigned char c = *p;
    if (c == '"' || c == '\\') {
      dst[o++] = '\\';
      dst[o++] = (char)c;
    } else if (c == '\n') {
      dst[o++] = '\\';
      dst[o++] = 'n';
    } else if (c < 0x20) {
      memcpy(dst + o, "\\u00", 4);
      dst[o + 4] = hex[c >> 4];
      dst[o + 5] = hex[c & 15];
      o += 6;
    } else {
      dst[o++] = (char)c;
    }
  }
  return o;
}

void sbx_log(sbx_log_level level, const char *fmt, ...) {
  if (level > log_level) return;
  char msg[LOG_LINE_MAX / 2];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);

  struct timeval tv;
  gettimeofday(&tv, NULL);
  struct tm tm;
  gmtime_r(&tv.tv_sec, &tm);
  char ts[40];
  size_t tl = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(ts + tl, sizeof ts - tl, ".%03ldZ", (long)(tv.tv_usec / 1000));

  char line[LOG_LINE_MAX];
  size_t n;
  const char *lvl = level_name(level);
  if (log_format == SBX_LOG_JSON) {
    n = (size_t)snprintf(line, sizeof line, "{\"ts\":\"%s\",\"level\":\"%s\",\"comp\":\"%s\",\"msg\":\"", ts, lvl,
                         log_component);
    if (n < sizeof line) n += json_escape(line + n, sizeof line - n - 3, msg);
    if (n > sizeof line - 3) n = sizeof line - 3;
    memcpy(line + n, "\"}\n", 3);
    n += 3;
  } else {
    int k = snprintf(line, sizeof line, "%s %s %s[%d]: %s\n", ts, lvl, log_component, (int)getpid(), msg);
    n = k < 0 ? 0 : (size_t)k >= sizeof line ? sizeof line - 1 : (size_t)k;
    if (n == sizeof line - 1) line[n - 1] = '\n';
  }
  ssize_t ignored = write(log_fd, line, n);
  (void)ignored;
}
