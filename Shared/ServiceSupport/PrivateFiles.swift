import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Files only the service's own user may read: what the services keep (scrypt hashes, ledgers, keys) is nobody
/// else's business on a shared machine. Data directories a service creates are 0700, database files 0600 (SQLite
/// gives its `-wal` and `-shm` files the database file's mode), keys 0600 from their first byte.
public enum PrivateFiles {
    /// Creates `url` and its missing parents, the new ones 0700. An existing directory keeps its mode: an operator
    /// may have opened it on purpose (`compose/up.sh` makes the shared data directory 0711 when a PostgreSQL
    /// cluster that runs as another user lives inside it).
    public static func directory(_ url: URL) throws {
        guard !FileManager.default.fileExists(atPath: url.path) else { return }
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    }

    /// The path of an SQLite database file, created empty with mode 0600 when missing (so SQLite never creates it
    /// with the process's umask), or brought to 0600.
    @discardableResult
    public static func databaseFile(_ path: String) throws -> String {
        let fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw CocoaError(.fileWriteNoPermission, userInfo: [NSFilePathErrorKey: path]) }
        defer { close(fd) }
        guard fchmod(fd, 0o600) == 0 else { throw CocoaError(.fileWriteNoPermission, userInfo: [NSFilePathErrorKey: path]) }
        for suffix in ["-wal", "-shm"] where FileManager.default.fileExists(atPath: path + suffix) {
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path + suffix)
        }
        return path
    }

    /// Writes a secret (a private key) to `url`: a new file opened 0600 beside it, written, flushed, renamed into
    /// place. Never readable by others, not even between the write and a chmod.
    public static func writeSecret(_ bytes: [UInt8], to url: URL) throws {
        let temporary = url.path + ".\(UUID().uuidString).tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw CocoaError(.fileWriteNoPermission, userInfo: [NSFilePathErrorKey: temporary]) }
        var ok = fchmod(fd, 0o600) == 0
        bytes.withUnsafeBytes { buffer in
            var offset = 0
            while ok, offset < buffer.count {
                let n = write(fd, buffer.baseAddress! + offset, buffer.count - offset)
                if n <= 0 { ok = false } else { offset += n }
            }
        }
        ok = ok && fsync(fd) == 0
        close(fd)
        guard ok, rename(temporary, url.path) == 0 else {
            unlink(temporary)
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: url.path])
        }
    }
}
