/*
 * sandbox-shim-confine-exec: the last step of `sandbox-shim confine` inside bwrap.
 *
 * Applies what the caller precomputed, in this order, then execs the program:
 *   1. Landlock (kernel Documentation/userspace-api/landlock.rst, landlock_create_ruleset(2),
 *      landlock_add_rule(2), landlock_restrict_self(2)): one ruleset handling HANDLED (file-system
 *      rights) and SCOPED (ABI 6 IPC scopes), one path-beneath rule per --rule; rights a rule may not
 *      hold on a non-directory are dropped (landlock_add_rule(2): EINVAL otherwise); a path that does
 *      not exist is skipped; then PR_SET_NO_NEW_PRIVS and landlock_restrict_self.
 *   2. a seccomp filter (seccomp(2), PR_SET_SECCOMP with SECCOMP_MODE_FILTER): classic BPF given as
 *      hex, loaded after no_new_privs is set.
 *   3. SIGINT and SIGQUIT to their defaults (the launcher leaves them ignored for bwrap), then
 *      execve(2) of PROGRAM with ARGS and the environment unchanged (execvp(3) for a bare name).
 *
 * It must run after bwrap has made the mounts: a Landlock-restricted thread may not mount(2) or
 * pivot_root(2) (landlock.rst, "Current limitations").  It does no policy of its own: every path and
 * right comes on the command line (platforms/linux/confine.py builds it).  Fails closed: if any step
 * fails the program is not run (exit 126); exec failures exit 127 (not found) or 126, like a shell.
 *
 * First, with --abi N, it asks the kernel for its Landlock ABI (landlock_create_ruleset(NULL, 0,
 * LANDLOCK_CREATE_RULESET_VERSION); 0 when it has none) and runs nothing when that differs from N:
 * the rights and scopes were computed for N (possibly from a kept value), and a stale or altered one
 * must never lower the enforcement.
 *
 * Usage: sandbox-shim-confine-exec [--abi N] [--ruleset HANDLED SCOPED] [--rule ACCESS PATH]...
 *                                  [--seccomp HEX] -- PROGRAM [ARGS]...
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef __NR_landlock_create_ruleset /* asm-generic unistd.h: the same number on every architecture */
#define __NR_landlock_create_ruleset 444
#define __NR_landlock_add_rule 445
#define __NR_landlock_restrict_self 446
#endif
#define RULE_PATH_BENEATH 1
#define CREATE_RULESET_VERSION (1U << 0)
/* rights valid on a rule whose target is not a directory: EXECUTE WRITE_FILE READ_FILE TRUNCATE IOCTL_DEV */
#define FILE_RIGHTS ((1ULL << 0) | (1ULL << 1) | (1ULL << 2) | (1ULL << 14) | (1ULL << 15))

struct ruleset_attr { /* struct landlock_ruleset_attr (ABI 6 size) */
    uint64_t handled_access_fs;
    uint64_t handled_access_net;
    uint64_t scoped;
};

struct path_beneath_attr { /* struct landlock_path_beneath_attr, packed */
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));

struct sock_filter_insn { uint16_t code; uint8_t jt, jf; uint32_t k; };
struct sock_fprog_arg { unsigned short len; struct sock_filter_insn *filter; };

static int fail(const char *what, const char *path)
{
    int e = errno;
    fprintf(stderr, "sandbox-shim confine: landlock layer could not be applied: %s%s%s: %s; not running\n",
            what, path ? " " : "", path ? path : "", strerror(e));
    return 126;
}

static int number(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    *out = strtoull(s, &end, 0);
    return errno == 0 && *s && !*end ? 0 : -1;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

int main(int argc, char **argv)
{
    int i = 1, have_ruleset = 0, nrules = 0, have_abi = 0;
    uint64_t handled = 0, scoped = 0, told = 0;
    const char *seccomp_hex = NULL;

    /* first pass: the ruleset's attributes and the filter; rules are applied in the second */
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "--abi") == 0 && i + 1 < argc) {
            if (number(argv[i + 1], &told)) goto usage;
            have_abi = 1;
            i += 1;
        } else if (strcmp(argv[i], "--ruleset") == 0 && i + 2 < argc) {
            if (number(argv[i + 1], &handled) || number(argv[i + 2], &scoped) || !handled) goto usage;
            have_ruleset = 1;
            i += 2;
        } else if (strcmp(argv[i], "--rule") == 0 && i + 2 < argc) {
            uint64_t access;
            if (number(argv[i + 1], &access)) goto usage;
            nrules++;
            i += 2;
        } else if (strcmp(argv[i], "--seccomp") == 0 && i + 1 < argc) {
            seccomp_hex = argv[++i];
        } else {
            goto usage;
        }
    }
    if (i + 1 >= argc || (nrules && !have_ruleset)) goto usage;
    char **program = argv + i + 1;

    if (have_abi) {
        long kernel = syscall(__NR_landlock_create_ruleset, NULL, 0, CREATE_RULESET_VERSION);
        if (kernel < 0) kernel = 0; /* ENOSYS / EOPNOTSUPP: no Landlock */
        if ((uint64_t)kernel != told) {
            fprintf(stderr, "sandbox-shim confine: the Landlock ABI given (%llu) is not the kernel's (%ld); "
                    "not running\n", (unsigned long long)told, kernel);
            return 126;
        }
    }

    if (have_ruleset) {
        struct ruleset_attr attr = {handled, 0, scoped};
        size_t size = scoped ? sizeof attr : sizeof attr.handled_access_fs; /* the ABI 1 size without scopes */
        int ruleset = (int)syscall(__NR_landlock_create_ruleset, &attr, size, 0);
        if (ruleset < 0) return fail("landlock_create_ruleset", NULL);
        for (int j = 1; j < i; j++) {
            if (strcmp(argv[j], "--rule") != 0) {
                if (strcmp(argv[j], "--ruleset") == 0) j += 2;
                else if (strcmp(argv[j], "--seccomp") == 0 || strcmp(argv[j], "--abi") == 0) j += 1;
                continue;
            }
            uint64_t access;
            number(argv[j + 1], &access);
            const char *path = argv[j + 2];
            j += 2;
            int fd = open(path, O_PATH | O_CLOEXEC);
            if (fd < 0) {
                if (errno == ENOENT) continue;
                return fail("open", path);
            }
            struct stat st;
            if (fstat(fd, &st) < 0) return fail("fstat", path);
            struct path_beneath_attr pb = {access & handled, fd};
            if (!S_ISDIR(st.st_mode)) pb.allowed_access &= FILE_RIGHTS;
            if (pb.allowed_access &&
                syscall(__NR_landlock_add_rule, ruleset, RULE_PATH_BENEATH, &pb, 0) < 0)
                return fail("landlock_add_rule", path);
            close(fd);
        }
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) return fail("prctl(PR_SET_NO_NEW_PRIVS)", NULL);
        if (syscall(__NR_landlock_restrict_self, ruleset, 0) < 0) return fail("landlock_restrict_self", NULL);
        close(ruleset);
    }
    if (seccomp_hex) {
        size_t n = strlen(seccomp_hex);
        if (n == 0 || n % 16) goto usage;
        struct sock_filter_insn *prog = malloc(n / 2);
        unsigned char *bytes = (unsigned char *)prog;
        if (!prog) return fail("malloc", NULL);
        for (size_t k = 0; k < n; k += 2) {
            int hi = hexval(seccomp_hex[k]), lo = hexval(seccomp_hex[k + 1]);
            if (hi < 0 || lo < 0) goto usage;
            bytes[k / 2] = (unsigned char)(hi << 4 | lo);
        }
        struct sock_fprog_arg fprog = {(unsigned short)(n / 16), prog};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) return fail("prctl(PR_SET_NO_NEW_PRIVS)", NULL);
        if (prctl(PR_SET_SECCOMP, 2 /* SECCOMP_MODE_FILTER */, &fprog, 0, 0) < 0)
            return fail("prctl(PR_SET_SECCOMP)", NULL);
        free(prog);
    }
    /* the launcher leaves SIGINT and SIGQUIT ignored for bwrap (a terminal's ^C reaches the whole
       foreground group, and bwrap dying of it would tear the sandbox down): the program gets them
       at their defaults, as a shell would start it */
    signal(SIGINT, SIG_DFL);
    signal(SIGQUIT, SIG_DFL);
    if (strchr(program[0], '/')) execv(program[0], program);
    else execvp(program[0], program);
    {
        int err = errno;
        fputs("sandbox-shim confine: ", stderr);
        for (const unsigned char *c = (const unsigned char *)program[0]; *c; c++) {
            if (*c < 0x20 || *c == 0x7f || *c == '\\') fprintf(stderr, "\\x%02x", *c);  /* one line */
            else fputc(*c, stderr);
        }
        fprintf(stderr, ": %s\n", strerror(err));
        return err == ENOENT ? 127 : 126;
    }

usage:
    fprintf(stderr, "sandbox-shim-confine-exec: bad arguments (see the source's header); not running\n");
    return 126;
}
