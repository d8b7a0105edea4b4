package dev.rtlab;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

/** What /proc says of the calling thread and process, for the tests. */
final class Proc {
    private Proc() {}

    /** Field {@code n} (1-based, as in proc(5)) of /proc/thread-self/stat. */
    static String statField(int n) throws IOException {
        String stat = Files.readString(Path.of("/proc/thread-self/stat"));
        String[] rest = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
        return rest[n - 3];
    }

    /** The kernel's priority of the calling thread (-21 for SCHED_FIFO 20, 20 for nice 0). */
    static int prio() throws IOException {
        return Integer.parseInt(statField(18));
    }

    static boolean root() throws IOException {
        return Files.readAllLines(Path.of("/proc/self/status")).stream()
                .anyMatch(l -> l.startsWith("Uid:") && l.split("\\s+")[1].equals("0"));
    }

    /** A JVM running {@code main} of a test class with these arguments. */
    static Process java(Class<?> main, String... args) throws IOException {
        String jvm = ProcessHandle.current().info().command().orElse("java");
        var command = new java.util.ArrayList<String>(java.util.List.of(jvm, "--enable-native-access=ALL-UNNAMED",
                "-Drtlab.library=" + System.getProperty("rtlab.library"),
                "-cp", System.getProperty("java.class.path"), main.getName()));
        command.addAll(java.util.List.of(args));
        return new ProcessBuilder(command).redirectErrorStream(true).start();
    }
}
