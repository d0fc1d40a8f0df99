import Foundation
import ServiceSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The content directory's digests: kept while a file stays the same file, computed again when it is replaced, even by
/// one of the same size whose modification time was set back to the old one's (`cp -p`, `touch -r`, an rsync that keeps
/// times): else its old SHA-256 and ETag were served for new bytes, and a download resumed with `If-Range` spliced the two.
@Suite struct ContentFilesTests {
    @Test func aFileReplacedBySameSizedBytesWithItsOldModificationTimeIsDigestedAgain() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("content-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let files = ContentFiles(directory: dir)
        let file = dir.appendingPathComponent("level-pack-1")
        try Data("old bytes".utf8).write(to: file)
        var old = stat()
        #expect(stat(file.path, &old) == 0)
        let digest = try #require(try files.installed("level-pack-1")?.sha256)
        #expect(try files.installed("level-pack-1")?.sha256 == digest, "kept")

        // Installed as a new file moved over the old (as `install` and most deploy tools do), its time set back to the
        // nanosecond (`touch -r`).
        let staged = dir.appendingPathComponent(".staged")
        try Data("new bytes".utf8).write(to: staged)
        let times = [old.st_atim, old.st_mtim]
        #expect(utimensat(AT_FDCWD, staged.path, times, 0) == 0)
        #expect(rename(staged.path, file.path) == 0)
        var now = stat()
        #expect(stat(file.path, &now) == 0)
        #expect(now.st_mtim.tv_sec == old.st_mtim.tv_sec && now.st_mtim.tv_nsec == old.st_mtim.tv_nsec && now.st_size == old.st_size)
        // A fresh reader (no digest kept) says what the new bytes' digest is.
        let fresh = try #require(try ContentFiles(directory: dir).installed("level-pack-1")?.sha256)
        #expect(fresh != digest)
        #expect(try files.installed("level-pack-1")?.sha256 == fresh)
        #expect(try files.installed("missing") == nil && (try files.installed("../etc") == nil))
    }
}
