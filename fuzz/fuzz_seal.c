/*
 * fuzz_seal.c: the data plane's record layer (transport/tcp_seal.h) reading a byte stream
 * a peer sent. Input: the mode (u8: integrity or encrypt), the cipher (u8; ChaCha20 where
 * this CPU has no AES-GCM), the size of each read (u16, + 1), then the stream, which goes
 * through a socket pair into scd_seal_recv under a fixed key. A read must give at most the
 * bytes asked for, no more plaintext in all than the stream held, and end in an orderly
 * close, EBADMSG (a record that fails its check) or EPROTO (a length over the limit).
 */
#include "fuzz.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/tcp_seal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_quiet();
	int mode = SCD_SEAL_INTEGRITY + (int)(fuzz_take(&data, &size, 1) % 2);
	int cipher = (int)(fuzz_take(&data, &size, 1) % 2);
	size_t piece = fuzz_take(&data, &size, 2) + 1;
	if (cipher == SCD_SEAL_AES256GCM && !scd_seal_aes_available())
		cipher = SCD_SEAL_CHACHA20;
	uint8_t key[SCD_SEAL_KEY_BYTES];
	memset(key, 0x11, sizeof(key));
	scd_seal_t *s = scd_seal_new(mode, cipher, key, key);
	int sp[2];
	int buf_bytes = 1 << 20;
	if (!s || size > (size_t)buf_bytes / 2 ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sp) != 0) {
		scd_seal_free(s);
		return 0;
	}
	(void)setsockopt(sp[0], SOL_SOCKET, SO_SNDBUF, &buf_bytes, sizeof(buf_bytes));
	FUZZ_REQUIRE(size == 0 || write(sp[0], data, size) == (ssize_t)size);
	close(sp[0]);
	unsigned char *out = malloc(piece);
	size_t total = 0;
	for (;;) {
		ssize_t n = scd_seal_recv(s, sp[1], out, piece);
		if (n > 0) {
			FUZZ_REQUIRE((size_t)n <= piece);
			total += (size_t)n;
			FUZZ_REQUIRE(total <= size);
			continue;
		}
		FUZZ_REQUIRE(n == 0 || errno == EBADMSG || errno == EPROTO);
		break;
	}
	free(out);
	close(sp[1]);
	scd_seal_free(s);
	return 0;
}
