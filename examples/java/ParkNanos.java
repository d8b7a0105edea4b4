import java.util.concurrent.locks.LockSupport;

/**
 * Parks for a fixed time in a loop and prints the real time per park, once per round.
 * Usage: java ParkNanos [parkNanos=10000] [parksPerRound=20000] [rounds=3]
 */
public final class ParkNanos {
    public static void main(String[] args) {
        long parkNanos = args.length > 0 ? Long.parseLong(args[0]) : 10_000;
        int parks = args.length > 1 ? Integer.parseInt(args[1]) : 20_000;
        int rounds = args.length > 2 ? Integer.parseInt(args[2]) : 3;
        System.out.println("pid " + ProcessHandle.current().pid());
        for (int round = 1; round <= rounds; round++) {
            long start = System.nanoTime();
            for (int i = 0; i < parks; i++) {
                LockSupport.parkNanos(parkNanos);
            }
            double perPark = (System.nanoTime() - start) / 1e3 / parks;
            System.out.printf("round %d: %.1f us per park of %d ns%n", round, perPark, parkNanos);
        }
    }
}
