/* Leveled logging to stderr as plain text or JSON lines. Each line is built
 * in a stack buffer and written with one write(2), so lines from threads and
 * processes sharing the fd never interleave. */
#include <stdarg.h>
#include <stdbool.h>
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
void sbx_log_set_format(sbx_log_format fmt) { log_format = fmt; }

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

/* Appends to a line being built, never past cap - 2 (room for the end). */
struct line {
  char *p;
  size_t n, cap;
};

static void put(struct line *l, const char *s, size_t n) {
  if (l->n + 2 >= l->cap) return;
  if (n > l->cap - 2 - l->n) n = l->cap - 2 - l->n;
  memcpy(l->p + l->n, s, n);
  l->n += n;
}

static void puts_(struct line *l, const char *s) { put(l, s, strlen(s)); }

static void put_json_str(struct line *l, const char *s) {
  puts_(l, "\"");
  if (l->n + 2 < l->cap) l->n += json_escape(l->p + l->n, l->cap - 3 - l->n, s);
  puts_(l, "\"");
}

/* JSON has no NaN or infinity; %.15g keeps durations and counts exact. */
static void put_num(struct line *l, double v, bool json) {
  char b[40];
  if (v != v || v > 1e300 || v < -1e300) snprintf(b, sizeof b, "%s", json ? "null" : "-");
  else snprintf(b, sizeof b, "%.15g", v);
  puts_(l, b);
}

/* A plain-text value is quoted when it would not read as one word. */
static void put_plain_str(struct line *l, const char *s) {
  bool quote = !*s || strpbrk(s, " \t\n\"=") != NULL;
  if (quote) put_json_str(l, s);
  else puts_(l, s);
}

static void emit(sbx_log_level level, const sbx_log_field *f, size_t nf, const char *fmt, va_list ap) {
  char msg[LOG_LINE_MAX / 2];
  vsnprintf(msg, sizeof msg, fmt, ap);

  struct timeval tv;
  gettimeofday(&tv, NULL);
  struct tm tm;
  gmtime_r(&tv.tv_sec, &tm);
  char ts[40];
  size_t tl = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(ts + tl, sizeof ts - tl, ".%03ldZ", (long)(tv.tv_usec / 1000));

  char buf[LOG_LINE_MAX], pid[24];
  struct line l = {buf, 0, sizeof buf};
  const char *lvl = level_name(level);
  snprintf(pid, sizeof pid, "%d", (int)getpid());
  if (log_format == SBX_LOG_JSON) {
    puts_(&l, "{\"time\":\"");
    puts_(&l, ts);
    puts_(&l, "\",\"level\":\"");
    puts_(&l, lvl);
    puts_(&l, "\",\"pid\":");
    puts_(&l, pid);
    puts_(&l, ",\"component\":");
    put_json_str(&l, log_component);
    puts_(&l, ",\"message\":");
    put_json_str(&l, msg);
    for (size_t i = 0; i < nf; i++) {
      puts_(&l, ",");
      put_json_str(&l, f[i].key);
      puts_(&l, ":");
      if (f[i].str) put_json_str(&l, f[i].str);
      else put_num(&l, f[i].num, true);
    }
    /* A line cut at the cap still closes its object (a string cut short
     * loses its quote: the reader sees the cut). */
    l.cap += 2;
    puts_(&l, "}");
  } else {
    puts_(&l, ts);
    puts_(&l, " ");
    puts_(&l, lvl);
    puts_(&l, " ");
    puts_(&l, log_component);
    puts_(&l, "[");
    puts_(&l, pid);
    puts_(&l, "]: ");
    puts_(&l, msg);
    for (size_t i = 0; i < nf; i++) {
      puts_(&l, " ");
      puts_(&l, f[i].key);
      puts_(&l, "=");
      if (f[i].str) put_plain_str(&l, f[i].str);
      else put_num(&l, f[i].num, false);
    }
    l.cap += 2;
  }
  buf[l.n++] = '\n';
  ssize_t ignored = write(log_fd, buf, l.n);
  (void)ignored;
}

void sbx_log(sbx_log_level level, const char *fmt, ...) {
  if (level > log_level) return;
  va_list ap;
  va_start(ap, fmt);
  emit(level, NULL, 0, fmt, ap);
  va_end(ap);
}

void sbx_log_fields(sbx_log_level level, const sbx_log_field *fields, size_t n, const char *fmt, ...) {
  if (level > log_level) return;
  va_list ap;
  va_start(ap, fmt);
  emit(level, fields, n, fmt, ap);
  va_end(ap);
}
