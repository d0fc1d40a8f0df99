import Testing

@testable import FulfillmentService

/// When the inbox worker reads another batch of due notifications at once: after a whole batch of which some came to an
/// end. Before, any whole batch did, so 100 whose outcomes could not be written (a full disk, a read-only database after
/// a failover) were read, verified and asked of Apple again and again without pause, and the outbox never had its turn.
@Suite struct InboxBatchTests {
    @Test func anotherBatchAtOnceOnlyAfterAWholeOneThatMadeProgress() {
        #expect(NotificationProcessor.takesAnotherBatch(whole: true, ended: 1))
        #expect(!NotificationProcessor.takesAnotherBatch(whole: true, ended: 0), "every one pending again: the next round")
        #expect(!NotificationProcessor.takesAnotherBatch(whole: false, ended: 99), "not a whole batch: nothing more is due")
    }
}
