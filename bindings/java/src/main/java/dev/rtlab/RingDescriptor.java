package dev.rtlab;

/**
 * The layout of rtlab's shared ring, format 4, as {@link ShmChannel}'s Java path reads and
 * writes it (as Agrona's {@code RingBufferDescriptor} names its own): the words
 * {@code rtlab_channel_layout} fills, and the record format. The ring's own description, and
 * the protocol, are in crates/rtlab-ipc/src/ring/mod.rs; every name here stands for a constant
 * there.
 *
 * <p>A record at position {@code p} (ring offset {@code p & (capacity - 1)}, always
 * {@link #RECORD_ALIGNMENT}-aligned) is a header of {@link #RECORD_HEADER_LENGTH} bytes (the
 * stamp, a {@code long} at {@link #STAMP_OFFSET}: {@code p + 1} once the record is complete;
 * the payload's length, an {@code int} at {@link #LENGTH_OFFSET}, or {@link #WRAP} for a
 * marker that sends the reader to offset 0), then the payload, padded to the alignment.
 */
final class RingDescriptor {
    private RingDescriptor() {}

    /** The ring format this binding was written for ({@code RTLAB_CHANNEL_FORMAT}). */
    static final int FORMAT = 4;

    // The words of rtlab_channel_layout, by index (each a long).
    /** {@link #FORMAT} of the mapped ring. */
    static final int FORMAT_WORD = 0;
    /** 1: one producer (the Java path may send without the producers' lock). */
    static final int SPSC_WORD = 1;
    /** The mapping's address. */
    static final int BASE_WORD = 2;
    /** The mapping's length in bytes. */
    static final int LENGTH_WORD = 3;
    /** The first 8 bytes of the mapping while it is intact. */
    static final int MAGIC_WORD = 4;
    /** Ring bytes (a power of two). */
    static final int CAPACITY_WORD = 5;
    /** Largest payload. */
    static final int MAX_MESSAGE_WORD = 6;
    /** Offset of the ring in the mapping. */
    static final int RING_OFFSET_WORD = 7;
    /** Offset of {@code head} (a long: bytes published). */
    static final int HEAD_OFFSET_WORD = 8;
    /** Offset of {@code tail} (a long: bytes consumed). */
    static final int TAIL_OFFSET_WORD = 9;
    /** Offset of the consumer's waiting flag (an int futex word). */
    static final int CONSUMER_WAITING_OFFSET_WORD = 10;
    /** Offset of the producer's waiting flag (an int futex word). */
    static final int PRODUCER_WAITING_OFFSET_WORD = 11;
    /** 1: a consumer may leave out its fence (the Java path fences anyway: ShmChannel.tryReceive). */
    static final int CONSUMER_FENCELESS_WORD = 12;
    /** How many words rtlab_channel_layout fills. */
    static final int LAYOUT_WORDS = 13;

    // The magic sits at the start of the mapping.
    static final long MAGIC_OFFSET = 0;

    // Records.
    /** Records start, and positions move, in multiples of this. */
    static final int RECORD_ALIGNMENT = 16;
    /** Stamp, length, 4 unused bytes. */
    static final int RECORD_HEADER_LENGTH = 16;
    /** Where a record's stamp sits in its header. */
    static final int STAMP_OFFSET = 0;
    /** Where a record's length sits in its header. */
    static final int LENGTH_OFFSET = 8;
    /** The stamp slot past the newest record, which the producer zeroes (so keeps free). */
    static final int STAMP_LENGTH = 8;
    /** The length of a wrap marker (u32::MAX). */
    static final int WRAP = -1;
    /** The ring starts cache-line aligned; records are placed with this line size in mind. */
    static final int CACHE_LINE = 64;

    /** Bytes a record of {@code length} payload bytes takes in the ring. */
    static long recordLength(long length) {
        return RECORD_HEADER_LENGTH + align(length);
    }

    /** {@code n} rounded up to {@link #RECORD_ALIGNMENT}. */
    static long align(long n) {
        return (n + RECORD_ALIGNMENT - 1) & -RECORD_ALIGNMENT;
    }

    /** True when {@code position} is a place a record may start. */
    static boolean aligned(long position) {
        return (position & (RECORD_ALIGNMENT - 1)) == 0;
    }

    /** The ring offset of {@code position} ({@code capacity} a power of two). */
    static long offset(long position, long capacity) {
        return position & (capacity - 1);
    }

    /** The ring offset of the cache line after the one holding {@code offset}. */
    static long nextLine(long offset, long capacity) {
        return offset((offset | (CACHE_LINE - 1)) + 1, capacity);
    }

    /** The end of the cache line holding ring offset {@code at} (the ring starts line-aligned). */
    static long lineEnd(long at) {
        return (at | (CACHE_LINE - 1)) + 1;
    }
}
