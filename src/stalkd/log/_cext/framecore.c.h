/* The data frame's bytes and its CRC32C, for _write.c (the writer's batch): log/frame.py is the
 * reference and holds the layout.
 *
 * CRC32C (Castagnoli, reflected, the crc32c package's): the SSE 4.2 instruction where the CPU
 * has it, else a byte-wise table; crc_init() must run first (at module init).
 */
#include <stdint.h>
#include <string.h>

#define HEADER 24
#define MAGIC 0xA7
#define DATA_FLAGS 0x80 /* FLAG_COMMITTED | KIND_DATA */

/* --- CRC32C ------------------------------------------------------------------------------- */

static uint32_t crc_table[256];
static int have_sse42 = 0;

static void
crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    have_sse42 = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t
crc_soft(uint32_t c, const unsigned char *p, size_t n)
{
    while (n--)
        c = crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) static uint32_t
crc_hw(uint32_t c, const unsigned char *p, size_t n)
{
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c64 = __builtin_ia32_crc32di(c64, v);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--)
        c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}
#endif

/* The raw update (no inversions), over ``n`` bytes. */
static uint32_t
crc_update(uint32_t c, const unsigned char *p, size_t n)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (have_sse42)
        return crc_hw(c, p, n);
#endif
    return crc_soft(c, p, n);
}

/* --- frames ------------------------------------------------------------------------------- */

static void
put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* One data frame (header, payload, padding, CRC) written at ``w``, ``size`` bytes in all. */
static void
write_frame(unsigned char *w, Py_ssize_t size, const unsigned char *data, Py_ssize_t n, unsigned long long delta,
            long long ts, unsigned long long epoch)
{
    w[4] = MAGIC;
    w[5] = DATA_FLAGS;
    put_le(w + 6, epoch, 2);
    put_le(w + 8, (uint64_t)n, 4);
    put_le(w + 12, delta, 4);
    put_le(w + 16, (uint64_t)ts, 8);
    memcpy(w + HEADER, data, (size_t)n);
    memset(w + HEADER + n, 0, (size_t)(size - HEADER - n));
    put_le(w, ~crc_update(0xFFFFFFFFu, w + 4, (size_t)(size - 4)), 4);
}

