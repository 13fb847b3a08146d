use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

fn answer(value: u32) -> impl FnOnce() -> BoxFuture<'static, Result<u32, ApiError>> {
    move || async move { Ok(value) }.boxed()
}

#[tokio::test(start_paused = true)]
async fn an_answer_is_reused_until_its_ttl_passes() {
    let cache = ReviewCache::new(Duration::from_secs(10), 10);
    assert_eq!(cache.get_or_review("k", answer(1)).await.unwrap(), 1);
    tokio::time::advance(Duration::from_secs(9)).await;
    assert_eq!(cache.get_or_review("k", answer(2)).await.unwrap(), 1);
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(cache.get_or_review("k", answer(3)).await.unwrap(), 3);
    assert_eq!(
        cache.stats(),
        CacheStats {
            hits: 1,
            misses: 2,
            refused: 0
        }
    );
}

#[tokio::test]
async fn a_full_cache_evicts_the_least_recently_used_answer_only() {
    let cache = ReviewCache::new(Duration::from_secs(10), 3);
    for (key, value) in [("a", 1), ("b", 2), ("c", 3)] {
        cache.insert(key, value);
    }
    assert_eq!(cache.get(&"a"), Some(1), "a is now the most recently used");
    cache.insert("d", 4);
    assert_eq!(cache.len(), 3);
    assert_eq!(cache.get(&"b"), None, "b was the least recently used");
    for (key, value) in [("a", 1), ("c", 3), ("d", 4)] {
        assert_eq!(cache.get(&key), Some(value), "{key}");
    }
}

#[tokio::test]
async fn a_failed_review_is_shared_but_not_cached() {
    let cache: ReviewCache<&str, u32> = ReviewCache::new(Duration::from_secs(10), 10);
    let failure = || async { Err(ApiError::ServiceUnavailable("down".to_owned())) };
    assert_eq!(
        cache.get_or_review("k", failure).await.unwrap_err().code(),
        503
    );
    assert!(cache.is_empty());
    assert_eq!(cache.get_or_review("k", answer(7)).await.unwrap(), 7);
}

#[tokio::test(start_paused = true)]
async fn a_review_whose_callers_gave_up_still_fills_the_cache() {
    let cache = ReviewCache::new(Duration::from_secs(10), 10);
    let reviews = Arc::new(AtomicUsize::new(0));
    let counted = reviews.clone();
    let slow = move || async move {
        counted.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok(5)
    };
    let gave_up =
        tokio::time::timeout(Duration::from_millis(10), cache.get_or_review("k", slow)).await;
    assert!(gave_up.is_err());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(cache.get(&"k"), Some(5));
    assert_eq!(reviews.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn past_the_most_reviews_under_way_a_new_key_is_refused_429_and_cached_answers_still_served()
{
    let cache: ReviewCache<u32, u32> =
        ReviewCache::with_max_flights(Duration::from_secs(60), 100, 2);
    cache.insert(7, 70);
    let (release, wait) = tokio::sync::watch::channel(false);
    let mut stuck = Vec::new();
    for key in [1, 2] {
        let cache = cache.clone();
        let mut wait = wait.clone();
        stuck.push(tokio::spawn(async move {
            cache
                .get_or_review(key, || async move {
                    let _ = wait.wait_for(|go| *go).await;
                    Ok(key * 10)
                })
                .await
        }));
    }
    tokio::task::yield_now().await;
    while cache.stats().misses < 2 {
        tokio::task::yield_now().await;
    }
    let refused = cache.get_or_review(3, || async { Ok(30) }).await;
    assert!(
        matches!(
            &refused,
            Err(ApiError::TooManyRequests {
                retry_after_seconds: 1,
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(
        cache.get_or_review(7, || async { Ok(0) }).await.unwrap(),
        70
    );
    assert_eq!(cache.stats().refused, 1);
    release.send_replace(true);
    for task in stuck {
        assert!(task.await.unwrap().is_ok());
    }
    assert_eq!(
        cache.get_or_review(3, || async { Ok(30) }).await.unwrap(),
        30,
        "room again"
    );
}

#[tokio::test(start_paused = true)]
async fn past_its_rate_a_cache_refuses_new_reviews_429_serves_cached_answers_and_refills_with_time()
{
    let rate = Rate {
        per_second: 10.0,
        burst: 5.0,
    };
    let cache: ReviewCache<u32, u32> =
        ReviewCache::with_limits(Duration::from_secs(60), 1000, 64, Some(rate));
    for key in 0..5 {
        assert_eq!(
            cache
                .get_or_review(key, move || async move { Ok(key) })
                .await
                .unwrap(),
            key
        );
    }
    let refused = cache.get_or_review(5, || async { Ok(5) }).await;
    assert!(
        matches!(&refused, Err(ApiError::TooManyRequests { message, retry_after_seconds: 1 }) if message.contains("10 new reviews")),
        "{refused:?}"
    );
    assert_eq!(cache.get_or_review(3, || async { Ok(0) }).await.unwrap(), 3);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(cache.get_or_review(5, || async { Ok(5) }).await.unwrap(), 5);
    assert!(cache.get_or_review(6, || async { Ok(6) }).await.is_err());
    let stats = cache.stats();
    assert_eq!((stats.misses, stats.refused), (6, 2));
}
