package dev.rtlab;

/** A failure reported by rtlab's native library, with its code (an errno value). */
public class RtlabException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final int code;

    RtlabException(String message, int code) {
        super(message);
        this.code = code;
    }

    /** The code (RTLAB_E* in rtlab.h: a Linux errno value). */
    public int code() {
        return code;
    }
}
