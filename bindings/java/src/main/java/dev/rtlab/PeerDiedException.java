package dev.rtlab;

/** The process at the other end of a {@link ShmChannel} died. */
public final class PeerDiedException extends RtlabException {
    private static final long serialVersionUID = 1L;

    PeerDiedException(String message) {
        super(message, Native.EPEERDIED);
    }
}
