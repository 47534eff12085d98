/*
 * libfreeway_hook.so: announce an unmodified application's elephants to the Freeway controller.
 *
 * Loaded with LD_PRELOAD (or by `freeway run -- COMMAND`), it wraps connect(). A TCP connect to an IPv4
 * address (or an IPv4-mapped IPv6 one) that matches one of the host's rules, on a socket that has not started
 * connecting, is announced before it proceeds: the socket is bound to a free port if it has none, an ANNOUNCE (the handshake of ryu_apps/host/handshake.py, version 1) goes to the
 * service address with the connection's 5-tuple and the rule's size and rate, and the hook waits for the
 * controller's ACK or NACK, at most FREEWAY_TIMEOUT_MS, then lets connect() proceed. A blocking connect
 * therefore starts once every switch on its path holds its entries; a non-blocking one is announced
 * without waiting (its first packets may go before the entries, on the mice paths). A signal that interrupts
 * the wait makes connect() fail with EINTR, as it would have. Anything else (another family, UDP, no
 * matching rule, the hook disabled, any error of the hook's own) calls the real connect() untouched, and
 * errno is always the real connect()'s.
 *
 * Environment:
 *   FREEWAY_RULES       rules, one per line or separated by ';' (see below)
 *   FREEWAY_RULES_FILE  a file of rules (used when FREEWAY_RULES is not set); '#' starts a comment
 *   FREEWAY_SERVICE     the handshake service, IP:PORT (10.255.255.254:7070)
 *   FREEWAY_TIMEOUT_MS  the longest a connect waits for the answer (300); the announce is sent again at
 *                       half of it
 *   FREEWAY_STATS=1     print the statistics at exit, on stderr
 *
 * A rule is space-separated KEY=VALUE words; a connection matches when every key given matches:
 *   port=5201[,5001,7000-7010]  destination ports
 *   sport=46000-46099           source ports the program bound the socket to (an unbound socket never matches)
 *   dst=10.0.0.0/8              destination prefix
 *   prog=iperf3                 the program's name (the last part of its argv[0])
 *   size=1G                     the flow's expected size in bytes (K, M, G: powers of 1000; 1G by default)
 *   rate=5M                     its expected rate in bit/s (K, M, G; 0, the default: as fast as the path allows)
 * The first matching rule gives the size and rate. A rule that cannot be read is reported once on stderr
 * and the hook disables itself: the program runs exactly as without it.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MAX_RULES 64
#define MAX_PORTS 32

typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);

struct ports {
    uint16_t lo[MAX_PORTS], hi[MAX_PORTS];
    int n;
};

struct rule {
    struct ports dport, sport;
    uint32_t net, mask; /* host order; mask 0: any destination */
    char prog[64];
    uint64_t size;
    uint32_t rate_kbps;
};

static connect_fn real_connect;
static struct rule rules[MAX_RULES];
static int nrules;
static int enabled;
static int stats_at_exit;
static int timeout_ms = 300;
static struct sockaddr_in service;
static atomic_ulong st_seen, st_matched, st_announced, st_acked, st_nacked, st_timedout, st_nowait, st_errors;

static void resolve_real(void) {
    real_connect = (connect_fn)dlsym(RTLD_NEXT, "connect");
}

static pthread_once_t once = PTHREAD_ONCE_INIT;

/* ----- reading the rules ------------------------------------------------------------------------ */

static int parse_amount(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v) || v < 0) return -1;
    double mult = 1;
    if (*end == 'K' || *end == 'k') mult = 1e3, end++;
    else if (*end == 'M' || *end == 'm') mult = 1e6, end++;
    else if (*end == 'G' || *end == 'g') mult = 1e9, end++;
    else if (*end == 'T' || *end == 't') mult = 1e12, end++;
    if (*end || v * mult >= 9.2e18) return -1; /* a double that does not fit a uint64_t: undefined */
    *out = (uint64_t)(v * mult + 0.5);
    return 0;
}

static int parse_ports(char *s, struct ports *p) {
    for (char *save = NULL, *tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *dash = strchr(tok, '-'), *end;
        long lo = strtol(tok, &end, 10), hi = lo;
        if (end == tok) return -1;
        if (dash) {
            if (end != dash) return -1;
            hi = strtol(dash + 1, &end, 10);
        }
        if (*end || lo < 1 || hi > 65535 || lo > hi || p->n == MAX_PORTS) return -1;
        p->lo[p->n] = (uint16_t)lo;
        p->hi[p->n++] = (uint16_t)hi;
    }
    return p->n ? 0 : -1;
}

static int in_ports(const struct ports *p, int port) {
    if (!p->n) return 1;
    for (int i = 0; i < p->n; i++)
        if (port >= p->lo[i] && port <= p->hi[i]) return 1;
    return 0;
}

static int parse_prefix(const char *s, struct rule *r) {
    char buf[64];
    const char *slash = strchr(s, '/');
    long len = 32;
    size_t n = slash ? (size_t)(slash - s) : strlen(s);
    if (n >= sizeof buf) return -1;
    memcpy(buf, s, n);
    buf[n] = 0;
    if (slash) {
        char *end;
        len = strtol(slash + 1, &end, 10);
        if (*end || end == slash + 1 || len < 0 || len > 32) return -1;
    }
    struct in_addr a;
    if (inet_pton(AF_INET, buf, &a) != 1) return -1;
    r->mask = len == 0 ? 0 : len == 32 ? 0xffffffffu : ~(0xffffffffu >> len); /* a shift by 32 is undefined */
    r->net = ntohl(a.s_addr) & r->mask;
    return 0;
}

/* One rule (a line); on error *why says what is wrong. */
static int parse_rule(char *line, struct rule *r, const char **why) {
    memset(r, 0, sizeof *r);
    r->size = 1000000000ull;
    int words = 0;
    for (char *save = NULL, *w = strtok_r(line, " \t\r", &save); w; w = strtok_r(NULL, " \t\r", &save)) {
        char *eq = strchr(w, '=');
        if (!eq || eq == w || !eq[1]) { *why = "expected KEY=VALUE words"; return -1; }
        *eq = 0;
        const char *key = w;
        char *val = eq + 1;
        uint64_t v;
        if (!strcmp(key, "port")) {
            if (parse_ports(val, &r->dport)) {
                *why = "port: expected ports 1-65535, e.g. port=5201,7000-7010"; return -1;
            }
        } else if (!strcmp(key, "sport")) {
            if (parse_ports(val, &r->sport)) {
                *why = "sport: expected ports 1-65535, e.g. sport=46000-46099"; return -1;
            }
        } else if (!strcmp(key, "dst")) {
            if (parse_prefix(val, r)) { *why = "dst: expected an IPv4 prefix, e.g. dst=10.0.0.0/8"; return -1; }
        } else if (!strcmp(key, "prog")) {
            if (strlen(val) >= sizeof r->prog) { *why = "prog: name too long"; return -1; }
            strcpy(r->prog, val);
        } else if (!strcmp(key, "size")) {
            if (parse_amount(val, &v) || v == 0 || v > (1ull << 50)) {
                *why = "size: expected bytes, e.g. size=500M (at most 1 PiB)"; return -1;
            }
            r->size = v;
        } else if (!strcmp(key, "rate")) {
            if (parse_amount(val, &v) || (v + 999) / 1000 > 0xffffffffull || (v && v < 1000)) {
                *why = "rate: expected bit/s, e.g. rate=5M (at least 1K, or 0)"; return -1;
            }
            r->rate_kbps = (uint32_t)((v + 999) / 1000);
        } else {
            *why = "unknown key (known: port, sport, dst, prog, size, rate)";
            return -1;
        }
        words++;
    }
    return words ? 1 : 0; /* 0: an empty line */
}

static void disable(const char *where, int line, const char *why) {
    fprintf(stderr, "freeway hook: %s line %d: %s; the hook is disabled\n", where, line, why);
    enabled = 0;
    nrules = 0;
}

static int parse_rules(char *text, const char *where) {
    int line = 0;
    for (char *ln = text; ln; ) {
        char *next = strchr(ln, '\n');
        if (next) *next++ = 0;
        line++; /* physical lines, empty ones included */
        char *hash = strchr(ln, '#');
        if (hash) *hash = 0; /* a comment ends the line, a ';' in it included */
        char *save = NULL;
        for (char *part = strtok_r(ln, ";", &save); part; part = strtok_r(NULL, ";", &save)) {
            struct rule r;
            const char *why = NULL;
            int got = parse_rule(part, &r, &why);
            if (got < 0) { disable(where, line, why); return -1; }
            if (!got) continue;
            if (nrules == MAX_RULES) { disable(where, line, "too many rules (at most 64)"); return -1; }
            rules[nrules++] = r;
        }
        ln = next;
    }
    return 0;
}

#define MAX_RULES_FILE 65536

/* A rules file: a regular file of at most 64 KiB (not a FIFO, a device or a directory); NULL with errno. */
static char *read_file(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size > MAX_RULES_FILE) {
        int e = fstat(fd, &st) ? errno : (!S_ISREG(st.st_mode) ? EINVAL : EFBIG);
        close(fd);
        errno = e;
        return NULL;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    size_t n = 0;
    ssize_t got;
    while (buf && n < (size_t)st.st_size && (got = read(fd, buf + n, (size_t)st.st_size - n)) > 0) n += (size_t)got;
    close(fd);
    if (buf) buf[n] = 0;
    return buf;
}

static void zero_stats(void) {
    st_seen = st_matched = st_announced = st_acked = st_nacked = st_timedout = st_nowait = st_errors = 0;
}

__attribute__((constructor)) static void hook_init(void) {
    pthread_once(&once, resolve_real);
    pthread_atfork(NULL, NULL, zero_stats); /* a child counts its own connections */
    const char *s = secure_getenv("FREEWAY_STATS");
    stats_at_exit = s && *s && strcmp(s, "0");
    service.sin_family = AF_INET;
    service.sin_port = htons(7070);
    inet_pton(AF_INET, "10.255.255.254", &service.sin_addr);
    const char *svc = secure_getenv("FREEWAY_SERVICE");
    if (svc && *svc) {
        char host[64], *pend = NULL;
        const char *colon = strrchr(svc, ':');
        long port = colon ? strtol(colon + 1, &pend, 10) : 0;
        size_t n = colon ? (size_t)(colon - svc) : 0;
        if (!colon || n >= sizeof host || !pend || *pend || pend == colon + 1 || port < 1 || port > 65535) {
            fprintf(stderr, "freeway hook: FREEWAY_SERVICE: expected IP:PORT, got '%s'; the hook is disabled\n", svc);
            return;
        }
        memcpy(host, svc, n);
        host[n] = 0;
        if (inet_pton(AF_INET, host, &service.sin_addr) != 1) {
            fprintf(stderr, "freeway hook: FREEWAY_SERVICE: '%s' is not an IPv4 address; the hook is disabled\n", host);
            return;
        }
        service.sin_port = htons((uint16_t)port);
    }
    const char *t = secure_getenv("FREEWAY_TIMEOUT_MS");
    if (t && *t) {
        char *end;
        long v = strtol(t, &end, 10);
        if (*end || v < 1 || v > 60000) {
            fprintf(stderr, "freeway hook: FREEWAY_TIMEOUT_MS: expected 1..60000, got '%s'; the hook is disabled\n", t);
            return;
        }
        timeout_ms = (int)v;
    }
    const char *text = secure_getenv("FREEWAY_RULES");
    const char *where = "FREEWAY_RULES";
    char *owned = NULL;
    if (!text || !*text) {
        const char *path = secure_getenv("FREEWAY_RULES_FILE");
        if (!path || !*path) return; /* no rules: nothing to announce */
        owned = read_file(path);
        if (!owned) {
            fprintf(stderr, "freeway hook: FREEWAY_RULES_FILE: cannot read %s: %s; the hook is disabled\n", path,
                    strerror(errno));
            return;
        }
        text = owned;
        where = path;
    }
    char *copy = owned ? owned : strdup(text);
    enabled = 1;
    if (copy) parse_rules(copy, where);
    free(copy);
    if (!nrules) enabled = 0;
}

__attribute__((destructor)) static void hook_fini(void) {
    if (!stats_at_exit || !st_seen) return; /* a program that made no TCP connect says nothing */
    fprintf(stderr,
            "freeway hook (pid %d, %s): %lu connections seen, %lu matched, %lu announced, %lu ACKed, %lu NACKed, "
            "%lu timed out, %lu not waited for (non-blocking), %lu not announced (hook errors)\n",
            (int)getpid(), program_invocation_short_name, st_seen, st_matched, st_announced, st_acked, st_nacked,
            st_timedout, st_nowait, st_errors);
}

/* ----- the announce ------------------------------------------------------------------------------ */

/* The first rule a connection matches. sport: its source port, 0 when it has none yet (a rule on source
   ports does not match then), -1 when not known yet (such a rule might). */
static const struct rule *match(uint32_t dst, int dport, int sport) {
    for (int i = 0; i < nrules; i++) {
        const struct rule *r = &rules[i];
        if (r->mask && (dst & r->mask) != r->net) continue;
        if (r->prog[0] && strcmp(r->prog, program_invocation_short_name)) continue;
        if (!in_ports(&r->dport, dport)) continue;
        if (sport == 0 && r->sport.n) continue;
        if (sport > 0 && !in_ports(&r->sport, sport)) continue;
        return r;
    }
    return NULL;
}

static void put64(uint8_t *p, uint64_t v) {
    for (int i = 7; i >= 0; i--, v >>= 8) p[i] = (uint8_t)v;
}

/* The ANNOUNCE: the 24-byte header, the rate, one 16-byte subflow (ryu_apps/host/handshake.py). Addresses and
   ports in network order. */
static size_t encode(uint8_t *b, uint64_t nonce, const struct rule *r, uint32_t src, uint16_t sport, uint32_t dst,
                     uint16_t dport) {
    memcpy(b, "FWHS", 4);
    b[4] = 1; /* version */
    b[5] = 1; /* ANNOUNCE */
    b[6] = 1; /* one subflow */
    b[7] = 0;
    put64(b + 8, nonce);
    put64(b + 16, r->size);
    uint32_t rate = htonl(r->rate_kbps);
    memcpy(b + 24, &rate, 4);
    uint8_t *s = b + 28;
    memcpy(s, &src, 4);
    memcpy(s + 4, &dst, 4);
    s[8] = IPPROTO_TCP;
    s[9] = 0;
    memcpy(s + 10, &sport, 2);
    memcpy(s + 12, &dport, 2);
    s[14] = s[15] = 0;
    return 44;
}

static long ms_since(const struct timespec *t0) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

enum { NO_ANSWER = 0, ACKED = 1, NACKED = 2, NOT_WAITED = 3, HOOK_ERROR = -1, INTERRUPTED = -2 };

/* Send the announce; with ``wait``, wait for the answer at most the timeout. A signal that interrupts the
   wait interrupts the connect (INTERRUPTED): a program's alarm() or Ctrl-C must not be swallowed. */
static int announce(const struct rule *r, uint32_t src, uint16_t sport, uint32_t dst, uint16_t dport, int wait) {
    uint64_t nonce;
    if (getrandom(&nonce, sizeof nonce, GRND_NONBLOCK) != sizeof nonce)
        nonce = ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)&nonce;
    nonce &= 0x7fffffffffffffffull;
    uint8_t msg[64], reply[1100];
    size_t n = encode(msg, nonce, r, src, sport, dst, dport);
    int cancel;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel); /* the socket below is always closed */
    int u = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int answer = HOOK_ERROR;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* connected to the service: only its answers are read, and a service nobody runs fails at once */
    if (u < 0 || real_connect(u, (const struct sockaddr *)&service, sizeof service) ||
        send(u, msg, n, 0) != (ssize_t)n)
        goto out;
    atomic_fetch_add(&st_announced, 1);
    if (!wait) {
        answer = NOT_WAITED;
        goto out;
    }
    answer = NO_ANSWER;
    long half = timeout_ms / 2;
    int resent = 0;
    for (;;) {
        long el = ms_since(&t0);
        if (el >= timeout_ms) break;
        long until = (!resent && el < half) ? half - el : timeout_ms - el; /* wake at half time to send again */
        struct pollfd p = {u, POLLIN, 0};
        int got = poll(&p, 1, (int)until);
        if (got < 0 && errno == EINTR) { answer = INTERRUPTED; break; }
        if (got < 0) break;
        if (got == 0) {
            if (!resent && ms_since(&t0) >= half) {
                resent = 1;
                send(u, msg, n, 0);
            }
            continue;
        }
        ssize_t len = recv(u, reply, sizeof reply, 0);
        if (len < 0 && errno == EINTR) { answer = INTERRUPTED; break; }
        if (len < 0) break; /* e.g. ECONNREFUSED: no service there; the connection goes unannounced */
        if (len < 24 || memcmp(reply, "FWHS", 4) || reply[4] != 1) continue;
        uint64_t their = 0;
        for (int i = 0; i < 8; i++) their = their << 8 | reply[8 + i];
        if (their != nonce) continue;
        if (reply[5] == 2) { answer = ACKED; break; }
        if (reply[5] == 3) { answer = NACKED; break; }
    }
out:
    if (u >= 0) close(u);
    pthread_setcancelstate(cancel, NULL);
    return answer;
}

/* The source address the kernel will use toward dst (a routing look-up: nothing is sent). */
static int source_toward(uint32_t dst, uint32_t *src) {
    int u = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (u < 0) return -1;
    struct sockaddr_in probe = {.sin_family = AF_INET, .sin_port = htons(9)}, got;
    probe.sin_addr.s_addr = dst;
    socklen_t len = sizeof got;
    int rc = real_connect(u, (const struct sockaddr *)&probe, sizeof probe);
    if (rc == 0) rc = getsockname(u, (struct sockaddr *)&got, &len);
    close(u);
    if (rc == 0) *src = got.sin_addr.s_addr;
    return rc;
}

/* A socket's own address in IPv4 terms (an IPv6 socket's v4-mapped one); port 0: not bound to one. */
static int local_v4(int fd, uint32_t *addr, uint16_t *port, int *wild) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len)) return -1;
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&ss;
        *addr = in->sin_addr.s_addr, *port = in->sin_port, *wild = in->sin_addr.s_addr == htonl(INADDR_ANY);
        return 0;
    }
    if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&ss;
        *port = in6->sin6_port;
        *wild = IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr);
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) memcpy(addr, in6->sin6_addr.s6_addr + 12, 4);
        else if (*wild) *addr = 0;
        else return -1; /* a real IPv6 address: not ours */
        return 0;
    }
    return -1;
}

/* Bind a socket that has no port to its wildcard address (or the address it is bound to) and a free port. */
static int bind_free_port(int fd, int family) {
    if (family == AF_INET6) {
        struct sockaddr_in6 any = {.sin6_family = AF_INET6};
        any.sin6_addr = in6addr_any;
        return bind(fd, (struct sockaddr *)&any, sizeof any);
    }
    struct sockaddr_in any = {.sin_family = AF_INET};
    any.sin_addr.s_addr = htonl(INADDR_ANY);
    return bind(fd, (struct sockaddr *)&any, sizeof any);
}

/* Whether a TCP socket has not started connecting (a second connect() on a connecting or connected one
   must not announce it again). */
static int tcp_closed(int fd) {
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len)) return 0;
    return ti.tcpi_state == TCP_CLOSE;
}

/* What the hook does before the real connect(); INTERRUPTED: connect() must fail with EINTR. */
static int prepare_and_announce(int fd, int family, uint32_t dst, uint16_t dport) {
    int type = 0, proto = 0;
    socklen_t len = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) || type != SOCK_STREAM) return 0;
    len = sizeof proto;
    if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &len) || proto != IPPROTO_TCP) return 0;
    if (!tcp_closed(fd)) return 0;
    atomic_fetch_add(&st_seen, 1);
    uint32_t hdst = ntohl(dst);
    int hport = ntohs(dport);
    if (!match(hdst, hport, -1)) return 0; /* no rule can match, whatever the source port */
    uint32_t src;
    uint16_t sport;
    int wild;
    if (local_v4(fd, &src, &sport, &wild)) return 0;
    if (sport == 0) {
        if (!wild) { /* bound to an address without a port (IP_BIND_ADDRESS_NO_PORT): leave it */
            atomic_fetch_add(&st_errors, 1);
            return 0;
        }
        if (!match(hdst, hport, 0)) return 0; /* only rules on source ports could match: not this one */
        if (bind_free_port(fd, family) || local_v4(fd, &src, &sport, &wild) || sport == 0) {
            atomic_fetch_add(&st_errors, 1);
            return 0;
        }
    }
    const struct rule *r = match(hdst, hport, ntohs(sport));
    if (!r) return 0;
    atomic_fetch_add(&st_matched, 1);
    if (wild && source_toward(dst, &src)) { /* the address the kernel will pick, for the announce only */
        atomic_fetch_add(&st_errors, 1);
        return 0;
    }
    int flags = fcntl(fd, F_GETFL);
    int blocking = flags >= 0 && !(flags & O_NONBLOCK);
    int got = announce(r, src, sport, dst, dport, blocking);
    switch (got) {
    case ACKED: atomic_fetch_add(&st_acked, 1); break;
    case NACKED: atomic_fetch_add(&st_nacked, 1); break;
    case NOT_WAITED: atomic_fetch_add(&st_nowait, 1); break;
    case NO_ANSWER: atomic_fetch_add(&st_timedout, 1); break;
    case INTERRUPTED: atomic_fetch_add(&st_timedout, 1); break;
    default: atomic_fetch_add(&st_errors, 1);
    }
    return got;
}

/* The destination in IPv4 terms, read without trusting the pointer (a bad one gets the real connect's
   EFAULT, not a crash): AF_INET, or AF_INET6 with a v4-mapped address. */
static int destination(const struct sockaddr *addr, socklen_t addrlen, int *family, uint32_t *dst, uint16_t *dport) {
    struct sockaddr_in6 copy;
    size_t n = addrlen < sizeof copy ? addrlen : sizeof copy;
    if (!addr || n < sizeof(struct sockaddr_in)) return -1;
    struct iovec local = {&copy, n}, remote = {(void *)addr, n};
    if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != (ssize_t)n) return -1;
    if (copy.sin6_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&copy;
        *family = AF_INET, *dst = in->sin_addr.s_addr, *dport = in->sin_port;
        return 0;
    }
    if (copy.sin6_family == AF_INET6 && n == sizeof copy && IN6_IS_ADDR_V4MAPPED(&copy.sin6_addr)) {
        *family = AF_INET6, *dport = copy.sin6_port;
        memcpy(dst, copy.sin6_addr.s6_addr + 12, 4);
        return 0;
    }
    return -1;
}

int connect(int fd, const struct sockaddr *addr, socklen_t addrlen) {
    pthread_once(&once, resolve_real);
    if (!real_connect) { /* no C library connect() to call: nothing sane to do but fail as the kernel would */
        errno = ENOSYS;
        return -1;
    }
    int family;
    uint32_t dst;
    uint16_t dport;
    if (enabled && !destination(addr, addrlen, &family, &dst, &dport)) {
        int saved = errno;
        if (prepare_and_announce(fd, family, dst, dport) == INTERRUPTED) {
            errno = EINTR; /* the socket has not started connecting: a retry starts afresh */
            return -1;
        }
        errno = saved; /* whatever the hook did, errno is the real connect's */
    }
    return real_connect(fd, addr, addrlen);
}
